"""What else on the node hands out this driver's devices, and whether the node can serve claims.

- `pod_resources`: a client of the kubelet's PodResources v1 API (which device-plugin devices exist, which pods hold them);
- `device_plugins`: device plugins of this driver's vendors (kubelet registrations, its checkpoint, the Node's
  allocatable, PodResources), merged into one report;
- `coexistence`: the policy on top of that report: which devices are withheld from the slices, which a prepare refuses;
- `same_name`: another DRA driver registered or publishing under this driver's name;
- `doctor`: the checks of `dra-driver doctor`.
"""
