"""Dynamic partitioning: every partition of every valid mode, made mutually exclusive by counters.

A GPU can be in one compute/memory mode at a time, but any number of the
partitions of that mode can be in use together. Counters express this without
consumable capacity:

* one counter per partition `<mode>-<i>` (e.g. `cpx-nps4-3`), capacity N, where
  N is the largest partition count of any mode;
* partition i of mode M consumes N of its own counter and 1 of every counter
  that belongs to another mode.

All partitions of one mode fit together (each own counter gets N, each other
mode's counter at most N x 1). Partitions of two different modes never fit:
the first one's own counter would need N + 1. The mode with the most
partitions needs no counters of its own (every conflict with it is already
caught on the other mode's counters), which keeps a MI300X (6 modes, 27
partitions) at 19 counters, under the limit of 32 per counter set.

The whole-GPU mode (SPX, one partition) is published under the GPU's own
name, so `type == "amdgpu"` selects a whole GPU in both partitioning modes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from dra_driver.common.logs import fields
from dra_driver.model.device import CounterConsumption, CounterSet, Device

from dra_driver_amd.attributes import gpu_name, placement_device
from dra_driver_amd.discovery import GpuInfo
from dra_driver_amd.modes import Mode

log = logging.getLogger(__name__)
MAX_COUNTERS = 32  # per counter set and per consumption entry (resource.k8s.io/v1)


@dataclass(frozen=True)
class Placement:
    """Partition `index` of GPU `gpu_bdf` in `mode`: what prepare must create for `device`."""

    device: str
    gpu_bdf: str
    mode: Mode
    index: int


@dataclass
class GpuCatalog:
    counter_set: CounterSet | None
    devices: list[Device]
    placements: list[Placement]


def counter_set_name(gpu: GpuInfo) -> str:
    return f"{gpu_name(gpu)}-modes"


def counter_name(mode: Mode, index: int) -> str:
    return f"{mode.key}-{index}"


def placement_name(gpu: GpuInfo, mode: Mode, index: int) -> str:
    return gpu_name(gpu) if mode.is_whole_gpu else f"{gpu_name(gpu)}-{mode.key}-{index}"


def published_modes(gpu: GpuInfo) -> tuple[list[Mode], list[Mode]]:
    """(modes published, modes that own counters), within the 32-counter limit.

    Modes are taken fewest partitions first; a mode that would push the
    counters past the limit is left out and logged.
    """
    if not gpu.modes:
        return [], []
    unguarded = max(gpu.modes, key=lambda m: m.partitions)
    published, guarded, used = [unguarded], [], 0
    for mode in gpu.modes:
        if mode == unguarded:
            continue
        if used + mode.partitions > MAX_COUNTERS:
            log.warning("partition mode left out: too many counters", extra=fields(gpu=gpu.bdf, mode=mode.key))
            continue
        used += mode.partitions
        published.append(mode)
        guarded.append(mode)
    return sorted(published, key=gpu.modes.index), guarded


def _consumption(gpu: GpuInfo, mode: Mode, index: int, guarded: list[Mode], capacity: int) -> CounterConsumption | None:
    counters: dict[str, str] = {}
    for other in guarded:
        if other == mode:
            counters[counter_name(mode, index)] = str(capacity)
        else:
            counters.update({counter_name(other, i): "1" for i in range(other.partitions)})
    return CounterConsumption(counter_set_name(gpu), counters) if counters else None


def gpu_catalog(gpu: GpuInfo, pcie_root: str | None) -> GpuCatalog:
    """The counter set and devices of one GPU under dynamic partitioning."""
    published, guarded = published_modes(gpu)
    capacity = max((m.partitions for m in published), default=1)
    counter_set = None
    if guarded:
        counter_set = CounterSet(
            counter_set_name(gpu),
            {counter_name(mode, i): str(capacity) for mode in guarded for i in range(mode.partitions)},
        )
    devices: list[Device] = []
    placements: list[Placement] = []
    for mode in published:
        for index in range(mode.partitions):
            name = placement_name(gpu, mode, index)
            device = placement_device(gpu, mode, index, pcie_root, name)
            consumption = _consumption(gpu, mode, index, guarded, capacity)
            if consumption is not None:
                device.consumes_counters.append(consumption)
            devices.append(device)
            placements.append(Placement(name, gpu.bdf, mode, index))
    return GpuCatalog(counter_set, devices, placements)
