"""dra-driver backend for nvidia accelerators."""
