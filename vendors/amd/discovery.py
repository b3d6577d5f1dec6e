"""Read what amdsmi reports into plain records: physical GPUs and their current partitions.

amdsmi gives one processor handle per partition (XCP). Handles are grouped by
their parent PCI address (amd-smi lists partition k of 0000:0c:00.0 as
0000:0c:00.k); partition 0 is the GPU's own function. A GPU whose handles cannot
be read is logged and skipped; the others are still published.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.common.logs import fields

from dra_driver_amd.modes import Mode, find_mode, modes_from_caps
from dra_driver_amd.smi import Smi, SmiError

log = logging.getLogger(__name__)
_warned_minors: set[str] = set()  # GPUs whose repeated DRM minors were already reported


@dataclass
class PartitionInfo:
    """One processor handle: a partition, or the whole GPU in SPX."""

    index: int
    bdf: str
    card: int
    render: int
    uuid: str | None
    memory_mb: int
    compute_units: int
    handle: Any = field(repr=False, compare=False)


@dataclass
class GpuInfo:
    """One physical GPU (or MI250X GCD) with everything the attributes need."""

    bdf: str  # the PCI function itself (partition 0)
    market_name: str
    device_id: str  # PCI device id, "0x74a1"
    gfx_target: str  # "gfx942"
    driver_version: str
    serial: str
    numa_node: int | None
    current: Mode | None  # None: no partition modes (CDNA2)
    modes: list[Mode]
    default_mode: Mode | None
    hive_id: int
    xgmi_links: int
    partitions: list[PartitionInfo]
    # sysfs product_name of the PCI device ("AMD Instinct MI300X OAM"), what the ROCm DRA driver and
    # the node labeller name the product by; "" when the board has none (then the market name is used).
    sysfs_product_name: str = ""

    @property
    def primary(self) -> PartitionInfo:
        return self.partitions[0]

    @property
    def handle(self) -> Any:
        return self.primary.handle

    @property
    def memory_mb(self) -> int:
        """Whole-GPU VRAM: each partition reports its share, so add them up."""
        return sum(p.memory_mb for p in self.partitions)

    @property
    def compute_units(self) -> int:
        return sum(p.compute_units for p in self.partitions)

    @property
    def is_partitioned(self) -> bool:
        """Anything but one whole-GPU partition is published as partitions."""
        return self.current is not None and not self.current.is_whole_gpu


def parent_bdf(bdf: str) -> str:
    return f"{bdf.rsplit('.', 1)[0]}.0"


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def read_partition(smi: Smi, handle: Any) -> PartitionInfo:
    bdf = smi.bdf(handle)
    enumeration = smi.enumeration_info(handle)
    kfd = smi.kfd_info(handle)
    index = kfd.get("current_partition_id")
    if not isinstance(index, int):
        index = int(bdf.rsplit(".", 1)[1])
    render, card = enumeration.get("drm_render"), enumeration.get("drm_card")
    if not isinstance(render, int) or not isinstance(card, int):
        raise SmiError("amdsmi_get_gpu_enumeration_info", None, f"no DRM minors for {bdf} (drm_render={render!r}, drm_card={card!r})")
    return PartitionInfo(
        index=index,
        bdf=bdf,
        card=card,
        render=render,
        uuid=smi.uuid(handle),
        memory_mb=_int(smi.vram_info(handle).get("vram_size")),
        compute_units=_int(smi.asic_info(handle).get("num_compute_units")),
        handle=handle,
    )


def read_partitions(smi: Smi, only: str | None = None) -> dict[str, list[PartitionInfo]]:
    """Every readable handle, grouped by the physical GPU's PCI address, ordered by index.

    With `only` (a GPU's PCI address), just that GPU's partitions are read in full: prepare looks
    one GPU up several times per claim, and reading every partition of the node each time made a
    dynamic 8-device claim cost ~14 ms of CPU on an 8-GPU node.
    """
    groups: dict[str, list[PartitionInfo]] = {}
    for handle in smi.processor_handles():
        try:
            if only is not None and parent_bdf(smi.bdf(handle)) != only:
                continue
            partition = read_partition(smi, handle)
        except SmiError as exc:
            log.warning("skipping unreadable AMD processor", extra=fields(error=str(exc)))
            continue
        groups.setdefault(parent_bdf(partition.bdf), []).append(partition)
    for bdf, partitions in groups.items():
        partitions.sort(key=lambda p: p.index)
        groups[bdf] = _unique_minors(bdf, partitions)
    return groups


def _unique_minors(bdf: str, partitions: list[PartitionInfo]) -> list[PartitionInfo]:
    """Partitions with distinct DRM minors, so every partition gets its own device name.

    Before ROCm 6.4.1 amdsmi reported the primary's card and render minors for
    every partition (AMD SMI Python API docs). The kernel numbers a GPU's partitions
    consecutively from its primary (renderD128..135 for GPU 0 in CPX,
    amdgpu kernel driver), so the minors are derived as primary + partition index.
    """
    minors = {(p.card, p.render) for p in partitions}
    if len(minors) == len(partitions):
        return partitions
    primary = partitions[0]
    # Handles are enumerated again on every mode change: warn once per GPU, not each time.
    log_at = logging.WARNING if bdf not in _warned_minors else logging.DEBUG
    _warned_minors.add(bdf)
    log.log(
        log_at,
        "amdsmi reports the same DRM minors for several partitions (ROCm < 6.4.1); deriving them from the partition index",
        extra=fields(bdf=bdf, card=primary.card, render=primary.render, partitions=len(partitions)),
    )
    return [
        dataclasses.replace(p, card=primary.card + p.index - primary.index, render=primary.render + p.index - primary.index)
        for p in partitions
    ]


def _xgmi_links(smi: Smi, gpu: PartitionInfo, others: Sequence[PartitionInfo]) -> int:
    return sum(1 for other in others if smi.is_xgmi_neighbour(gpu.handle, other.handle))


def read_gpu(smi: Smi, bdf: str, partitions: list[PartitionInfo], peers: Sequence[PartitionInfo]) -> GpuInfo:
    primary = partitions[0]
    handle = primary.handle
    asic = smi.asic_info(handle)
    modes, default = modes_from_caps(smi.accelerator_profiles(handle), smi.memory_partition_caps(handle))
    compute, memory = smi.compute_partition(handle), smi.memory_partition(handle)
    current = find_mode(modes, compute, memory)
    if current is None and compute:
        # The GPU is in a mode its caps do not list (or caps are unreadable): trust what it is in.
        current = Mode(compute, memory or "NPS1", len(partitions))
    hive = smi.xgmi_hive_id(handle)
    return GpuInfo(
        bdf=bdf,
        market_name=str(asic.get("market_name") or "N/A"),
        device_id=str(asic.get("device_id") or "N/A").lower(),
        gfx_target=str(asic.get("target_graphics_version") or "N/A"),
        driver_version=str(smi.driver_info(handle).get("driver_version") or "N/A"),
        serial=str(asic.get("asic_serial") or "N/A"),
        numa_node=smi.numa_node(handle),
        current=current,
        modes=modes,
        default_mode=default,
        hive_id=hive,
        xgmi_links=_xgmi_links(smi, primary, peers) if hive else 0,
        partitions=partitions,
    )


def discover_gpus(smi: Smi) -> list[GpuInfo]:
    """All readable GPUs, ordered by PCI address."""
    groups = read_partitions(smi)
    primaries = {bdf: parts[0] for bdf, parts in groups.items()}
    gpus: list[GpuInfo] = []
    for bdf in sorted(groups):
        peers = [p for other, p in primaries.items() if other != bdf]
        try:
            gpus.append(read_gpu(smi, bdf, groups[bdf], peers))
        except SmiError as exc:
            log.warning("skipping unreadable AMD GPU", extra=fields(bdf=bdf, error=str(exc)))
    return gpus
