"""The backend side of the core: the interface every vendor backend implements (interface), how
backends are found (registry), the shared attribute vocabulary, helpers for backends (support, sysfs) and
the hardware profiles (hardware_profiles and profiles/: data the offline tools read too; simulating them is
dra_driver.simulation's)."""
