"""dra-driver backend for gaudi accelerators."""
