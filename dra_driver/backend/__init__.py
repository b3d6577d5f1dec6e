"""The backend side of the core: the interface every vendor backend implements (interface), how
backends are found (registry), the shared attribute vocabulary, helpers for backends (support, sysfs) and
simulation support (hardware_profiles and profiles/, sim_scratch, sim_state, sim_node)."""
