"""Device names, attributes and capacities of AMD GPUs and partitions (docs/attributes.md, AMD).

Names and attribute names follow the ROCm DRA driver (gpu.amd.com, ROCm/k8s-gpu-dra-driver);
`productName` is normalised like the ROCm driver's, from the same source (sysfs
product_name) where the board has one, else from the amdsmi market name
(docs/attributes.md); the cross-vendor vocabulary (dra_driver.backend.vocabulary) is added to
every device.
"""

from __future__ import annotations

import re

from dra_driver.backend import vocabulary
from dra_driver.model.device import AttributeValue, Device, Version
from dra_driver.model.quantity import from_count, from_mebibytes

from dra_driver_amd.discovery import GpuInfo, PartitionInfo
from dra_driver_amd.modes import Mode

TYPE_GPU = "amdgpu"
TYPE_PARTITION = "amdgpu-partition"
SIMDS_PER_CU = 4  # every CDNA compute unit has four SIMD units (KFD simd_per_cu)

# gfx target -> architecture family (the common vocabulary's `family`).
_FAMILIES = {
    "gfx908": "cdna1",
    "gfx90a": "cdna2",
    "gfx940": "cdna3",
    "gfx941": "cdna3",
    "gfx942": "cdna3",
    "gfx950": "cdna4",
}
_VERSION_PREFIX = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def family(gfx_target: str) -> str:
    return _FAMILIES.get(gfx_target.lower(), "unknown")


def product_name(name: str) -> str:
    """The ROCm driver's form: spaces to '_', parentheses dropped ("AMD Instinct MI300X OAM" -> "AMD_Instinct_MI300X_OAM")."""
    return re.sub(r"[()]", "", name.strip()).replace(" ", "_")[: vocabulary.MAX_VALUE_BYTES]


def driver_version(raw: str) -> Version | None:
    """MAJOR.MINOR.PATCH from the driver's version string ("6.8.0-45-generic" -> 6.8.0), None if none."""
    match = _VERSION_PREFIX.match(raw.strip())
    if not match:
        return None
    return Version(".".join(str(int(part or 0)) for part in match.groups()))


def gpu_name(gpu: GpuInfo) -> str:
    return partition_name(gpu.primary)


def partition_name(partition: PartitionInfo) -> str:
    """gpu-<card>-<renderD>, as the ROCm DRA driver names devices."""
    return f"gpu-{partition.card}-{partition.render}"


def _capacity(memory_mb: int, compute_units: int) -> dict[str, str]:
    return {
        "memory": from_mebibytes(memory_mb),  # amdsmi "MB" are MiB (196592 MB = 206141652992 B)
        "computeUnits": from_count(compute_units),
        "simdUnits": from_count(compute_units * SIMDS_PER_CU),
    }


def base_attributes(gpu: GpuInfo, pcie_root: str | None, partition: bool) -> dict[str, AttributeValue]:
    """Attributes every device of this GPU carries (whole GPU, partition, dynamic placement)."""
    attributes: dict[str, AttributeValue] = {
        "productName": product_name(gpu.sysfs_product_name or gpu.market_name),
        "deviceID": gpu.device_id,
        "gfxTarget": gpu.gfx_target,
        "driverVersionFull": gpu.driver_version[: vocabulary.MAX_VALUE_BYTES],
        vocabulary.PCI_BUS_ID: gpu.bdf,
    }
    version = driver_version(gpu.driver_version)
    if version is not None:
        attributes["driverVersion"] = version
    if gpu.numa_node is not None:
        attributes["numaNode"] = gpu.numa_node  # kept beside the standard name for selectors written before 1.37
        attributes[vocabulary.NUMA_NODE] = gpu.numa_node
    if pcie_root:
        attributes[vocabulary.PCIE_ROOT] = pcie_root
    hive = ""
    if gpu.hive_id:
        hive = f"0x{gpu.hive_id:016x}"
        attributes["xgmiHiveID"] = hive
    attributes.update(
        vocabulary.common_attributes(
            vendor="amd",
            family=family(gpu.gfx_target),
            partition=partition,
            interconnect="xgmi" if gpu.hive_id else "none",
            domain=hive or None,
            links=gpu.xgmi_links,
        )
    )
    return attributes


def mode_attributes(mode: Mode | None) -> dict[str, AttributeValue]:
    if mode is None:
        return {}
    return {
        "partitionProfile": mode.profile,
        "computePartition": mode.compute.lower(),
        "memoryPartition": mode.memory.lower(),
    }


def gpu_device(gpu: GpuInfo, pcie_root: str | None) -> Device:
    """The whole GPU (SPX, or an ASIC without partition modes)."""
    primary = gpu.primary
    attributes: dict[str, AttributeValue] = {"type": TYPE_GPU, **base_attributes(gpu, pcie_root, partition=False)}
    attributes.update(mode_attributes(gpu.current))
    attributes.update({"cardIndex": primary.card, "renderIndex": primary.render})
    if primary.uuid:
        attributes["uuid"] = primary.uuid
    return Device(name=gpu_name(gpu), attributes=attributes, capacity=_capacity(gpu.memory_mb, gpu.compute_units))


def partition_device(gpu: GpuInfo, partition: PartitionInfo, pcie_root: str | None) -> Device:
    """One existing partition (XCP) of a GPU in a non-default mode; names its parent GPU."""
    attributes: dict[str, AttributeValue] = {"type": TYPE_PARTITION, **base_attributes(gpu, pcie_root, partition=True)}
    attributes.update(mode_attributes(gpu.current))
    attributes.update(
        {
            "partitionIndex": partition.index,
            "parentPciBusID": gpu.bdf,
            "parentDevice": gpu_name(gpu),
            "cardIndex": partition.card,
            "renderIndex": partition.render,
        }
    )
    if partition.uuid:
        attributes["uuid"] = partition.uuid
    return Device(
        name=partition_name(partition),
        attributes=attributes,
        capacity=_capacity(partition.memory_mb, partition.compute_units),
    )


def placement_device(gpu: GpuInfo, mode: Mode, index: int, pcie_root: str | None, name: str) -> Device:
    """A partition that prepare can create: partition `index` of `mode` (dynamic partitioning)."""
    whole = mode.is_whole_gpu
    attributes: dict[str, AttributeValue] = {
        "type": TYPE_GPU if whole else TYPE_PARTITION,
        **base_attributes(gpu, pcie_root, partition=not whole),
        **mode_attributes(mode),
    }
    if not whole:
        attributes.update({"partitionIndex": index, "parentPciBusID": gpu.bdf, "parentDevice": gpu_name(gpu)})
    return Device(
        name=name,
        attributes=attributes,
        capacity=_capacity(gpu.memory_mb // mode.partitions, gpu.compute_units // mode.partitions),
    )
