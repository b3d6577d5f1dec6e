"""Device readings for the node's metrics: NVML's utilization, memory, power, temperature and ECC calls.

Read-only towards the GPU: only Get calls. A call a board does not support (ECC on a GeForce, power on
some MIG setups) leaves its reading out (None); any other failure is logged at debug and leaves it out
too, so one broken GPU never hides the others' readings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import TypeVar

from dra_driver.backend.interface import DeviceReadings, DeviceSample
from dra_driver.common.logs import fields
from dra_driver_nvidia import nvml
from dra_driver_nvidia.discovery import GpuInfo
from dra_driver_nvidia.nvml import NvmlError

log = logging.getLogger(__name__)
T = TypeVar("T")
# Readings NVML gives for a whole GPU only: a MIG device reports its parent's (docs/metrics.md, "Partitions").
PARENT_READINGS = ("utilization", "power_watts", "temperature_celsius")


GpuReadings = DeviceReadings  # one readings type for every vendor (dra_driver.backend.interface)


@dataclass(frozen=True)
class MigInstance:
    uuid: str
    memory_used: int | None
    memory_total: int | None


def _read(what: str, gpu: str, call: Callable[[], T]) -> T | None:
    try:
        return call()
    except NvmlError as exc:
        if not exc.not_supported:
            log.debug("GPU reading failed", extra=fields(gpu=gpu, reading=what, call=exc.call, error=exc.detail))
        return None


def read_gpu(gpu: GpuInfo) -> GpuReadings:
    """One GPU's readings (utilization first: on the simulated library it is the call that moves the values)."""
    handle, name = gpu.handle, gpu.name
    readings = GpuReadings(utilization=_read("utilization", name, lambda: nvml.utilization(handle)))
    memory = _read("memory", name, lambda: nvml.memory_used(handle))
    if memory is not None:
        readings.memory_used, readings.memory_total = memory
    readings.power_watts = _read("power", name, lambda: nvml.power_watts(handle))
    readings.temperature_celsius = _read("temperature", name, lambda: nvml.temperature_celsius(handle))
    for kind, uncorrected in (("ecc_corrected", False), ("ecc_uncorrected", True)):
        count = _read(kind, name, partial(nvml.ecc_errors, handle, uncorrected))
        if count is not None:
            readings.errors[kind] = count
    return readings


def mig_instances(gpu: GpuInfo) -> dict[int, MigInstance]:
    """GPU instance id -> the MIG device there now, with its own memory reading."""
    found: dict[int, MigInstance] = {}
    count = _read("MIG devices", gpu.name, lambda: nvml.max_mig_device_count(gpu.handle)) or 0
    for position in range(count):
        handle = _read("MIG device", gpu.name, partial(nvml.mig_device_handle, gpu.handle, position))
        if handle is None:
            continue  # an empty slot
        gi_id = _read("MIG instance id", gpu.name, partial(nvml.gpu_instance_id, handle))
        uuid = _read("MIG uuid", gpu.name, partial(nvml.uuid, handle))
        if gi_id is None or uuid is None:
            continue
        memory = _read("MIG memory", gpu.name, partial(nvml.memory_used, handle))
        used, total = memory if memory is not None else (None, None)
        found[gi_id] = MigInstance(uuid, used, total)
    return found


def sample(
    name: str, gpu: GpuInfo, readings: GpuReadings, mig: MigInstance | None, partition: bool, sharing: str, daemons: Mapping[str, bool]
) -> DeviceSample:
    """The published device `name` on `gpu`: the GPU itself, or a partition (its MIG device `mig`, None while uncreated)."""
    common = DeviceSample(
        device=name, pci_bus_id=gpu.pci_bus_id, model=gpu.product_name, sharing=sharing, mps_daemons=dict(daemons),
        utilization=readings.utilization, power_watts=readings.power_watts, temperature_celsius=readings.temperature_celsius,
        errors=dict(readings.errors),
    )  # fmt: skip
    if not partition:
        return replace(common, uuid=gpu.uuid, memory_used_bytes=readings.memory_used, memory_total_bytes=readings.memory_total)
    # A partition: memory of its own instance; the rest measured on the parent GPU; errors are the parent's.
    if mig is None:
        return replace(common, per_parent=PARENT_READINGS + ("errors",))
    return replace(
        common, uuid=mig.uuid, memory_used_bytes=mig.memory_used, memory_total_bytes=mig.memory_total, per_parent=PARENT_READINGS + ("errors",)
    )
