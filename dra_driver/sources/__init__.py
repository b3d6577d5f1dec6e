"""What the offline tools read: claims, classes and pods from files (claims), a fleet's
ResourceSlices from files, a simulated profile or a cluster (fleet), which one a command was given and
its nodes (fleet_source), the shipped DeviceClasses layered under the fleet's and the user's (classes),
and where a workload's pod templates are (workloads: core kinds; operators: operator resources), which
explain, template, fleet and migrate share."""
