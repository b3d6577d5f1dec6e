"""The node side: the daemon, the kubelet plugin, the ResourceSlice publisher, CDI specs, the checkpoint,
file modes, metrics and readiness, and the checks of what else on the node hands out its devices."""
