"""dra-driver backend for Intel Gaudi accelerators (driver name gaudi.intel.com).

Discovery reads the habanalabs sysfs tree and needs no library; the optional
`habana-pyhlml` package adds serial numbers and critical-error health events.
"""
