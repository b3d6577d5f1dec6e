"""What the offline tools read: claims, classes and pods from files (claims), a fleet's
ResourceSlices from files, a simulated profile or a cluster (fleet), and where a workload's pod
templates are (workloads: core kinds; operators: operator resources), which explain and migrate share."""
