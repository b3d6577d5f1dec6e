"""The common attribute vocabulary every backend publishes (docs/attributes.md).

One CEL selector can then choose across vendors, for example:
    device.attributes["dra-driver.io"].family in ["hopper", "cdna3", "gaudi3"]
    "memory" in device.capacity[device.driver] &&
        device.capacity[device.driver].memory.compareTo(quantity("80Gi")) >= 0
Total device memory, when the driver knows it, is capacity `memory` in the
driver's own domain. It can be absent (a Gaudi with an unknown PCI ID and no
HLML), so selectors must guard the lookup: a missing key is a CEL runtime error.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from dra_driver.model.device import AttributeValue
from dra_driver.model.validation import MAX_VALUE_LENGTH

DOMAIN = "dra-driver.io"
VENDOR = f"{DOMAIN}/vendor"  # "nvidia" | "amd" | "intel"
FAMILY = f"{DOMAIN}/family"  # lower-case architecture family: "hopper", "cdna3", "gaudi3", ...
PARTITION = f"{DOMAIN}/partition"  # true for MIG devices and AMD partitions
INTERCONNECT = f"{DOMAIN}/interconnect"  # "nvlink" | "xgmi" | "roce" | "none"
INTERCONNECT_DOMAIN = f"{DOMAIN}/interconnectDomain"  # equal value = reachable over the scale-up fabric
# Scale-up links as each vendor's library counts them (units differ; docs/attributes.md):
# NVIDIA NVLink links up, Gaudi in-box RoCE ports, AMD peers one XGMI hop away.
INTERCONNECT_LINKS = f"{DOMAIN}/interconnectLinks"

# The DRA driver names of the shipped backends (each one's whole-device DeviceClass is named after it).
NVIDIA_DRIVER = "gpu.nvidia.com"
AMD_DRIVER = "gpu.amd.com"
GAUDI_DRIVER = "gaudi.intel.com"
# The shipped DeviceClasses (deviceclasses/) of partitions: any NVIDIA MIG device, any AMD GPU partition.
MIG_CLASS = "mig.nvidia.com"
AMD_PARTITION_CLASS = "partition.gpu.amd.com"
# The vendor value of each shipped driver (for slices of drivers that predate the vocabulary, or
# foreign drivers with the same name), and the names people type for vendors.
DRIVER_VENDORS = {NVIDIA_DRIVER: "nvidia", AMD_DRIVER: "amd", GAUDI_DRIVER: "intel"}
VENDOR_ALIASES = {"nvidia": "nvidia", "amd": "amd", "gaudi": "intel", "intel": "intel"}
# Resource-name domains of the accelerator vendors' device plugins (and their node labellers): what migrate
# converts, and what a node running dra-driver has no device plugin for.
VENDOR_DOMAINS = ("nvidia.com", "amd.com", "habana.ai", "gpu.intel.com")

# Kubernetes-standard attributes (k8s.io/dynamic-resource-allocation/deviceattribute).
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
# The host NUMA node (KEP-6072, standard in 1.37): equal values across drivers (GPUs, NICs, CPUs) align in matchAttribute.
NUMA_NODE = "resource.kubernetes.io/numaNode"

MAX_VALUE_BYTES = MAX_VALUE_LENGTH  # what an attribute's string value may hold (the API's limit)


def device_vendor(driver: str, attributes: Mapping[str, tuple[str, Any]]) -> str:
    """A published device's vendor: its `dra-driver.io/vendor` string, else its shipped driver's; "" when unknown.

    `attributes` are keyed by qualified name with (type, value) values, as the allocator reads a slice.
    """
    value = attributes.get(VENDOR)
    if value is not None and value[0] == "string":
        return str(value[1])
    return DRIVER_VENDORS.get(driver, "")


def interconnect_domain(*parts: str) -> str:
    """A stable identifier for a scale-up domain that fits the 64-byte attribute limit.

    Parts are joined with '.'; when the result is too long (long node names),
    the tail is replaced by a short hash so distinct domains stay distinct.
    """
    joined = ".".join(part for part in parts if part)
    if len(joined.encode()) <= MAX_VALUE_BYTES:
        return joined
    digest = hashlib.sha256(joined.encode()).hexdigest()[:16]
    return f"{joined.encode()[: MAX_VALUE_BYTES - 17].decode(errors='ignore')}-{digest}"


def common_attributes(
    vendor: str,
    family: str,
    partition: bool,
    interconnect: str = "none",
    domain: str | None = None,
    links: int = 0,
) -> dict[str, AttributeValue]:
    """The vocabulary attributes of one device, ready to merge into Device.attributes."""
    attributes: dict[str, AttributeValue] = {
        VENDOR: vendor,
        FAMILY: family.lower(),
        PARTITION: partition,
        INTERCONNECT: interconnect,
        INTERCONNECT_LINKS: int(links),
    }
    if domain:
        attributes[INTERCONNECT_DOMAIN] = domain
    return attributes
