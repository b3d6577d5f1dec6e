"""dra-driver backend for amd accelerators."""
