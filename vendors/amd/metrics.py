"""Device readings for the node's metrics: amdsmi's activity, VRAM, power, temperature and RAS ECC calls.

Read-only towards the GPU: only Get calls. amdsmi gives one processor handle per partition (XCP). Each
published device is read on its own handle; a reading that handle does not give (power and temperature on a
secondary partition: the SMU measures the socket) is taken from the GPU's primary handle and named in
`per_parent` (docs/metrics.md, "Partitions"). Error counters are the GPU's. A call the GPU does not support
leaves its reading out (None); any other failure is logged at debug and leaves it out too, so one broken GPU
never hides the others' readings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from dra_driver.backend.interface import DeviceReadings, DeviceSample
from dra_driver.common.logs import fields

from dra_driver_amd.attributes import product_name
from dra_driver_amd.discovery import GpuInfo
from dra_driver_amd.smi import Smi, SmiError

log = logging.getLogger(__name__)
T = TypeVar("T")


Readings = DeviceReadings  # one readings type for every vendor (dra_driver.backend.interface)


def _read(what: str, bdf: str, call: Callable[[], T]) -> T | None:
    try:
        return call()
    except SmiError as exc:
        log.debug("AMD GPU reading failed", extra=fields(bdf=bdf, reading=what, error=str(exc)))
        return None


def read_handle(smi: Smi, handle: Any, bdf: str, errors: bool) -> Readings:
    """One handle's readings (activity first: on the simulated library it is the call that moves the values)."""
    readings = Readings(utilization=_read("activity", bdf, lambda: smi.activity(handle)))
    vram = _read("vram", bdf, lambda: smi.vram_usage(handle))
    if vram is not None:
        readings.memory_used, readings.memory_total = vram
    readings.power_watts = _read("power", bdf, lambda: smi.power_watts(handle))
    readings.temperature_celsius = _read("temperature", bdf, lambda: smi.hotspot_celsius(handle))
    if errors:
        counts = _read("ecc", bdf, lambda: smi.ecc_counts(handle))
        readings.errors = counts or {}
    return readings


def live_handles(smi: Smi) -> dict[str, Any]:
    """Partition PCI address -> its processor handle now (handles change with the partition mode)."""
    found: dict[str, Any] = {}
    for handle in _read("processor handles", "", smi.processor_handles) or []:
        bdf = _read("bdf", "", partial(smi.bdf, handle))
        if bdf is not None:
            found[bdf] = handle
    return found


def sample(name: str, gpu: GpuInfo, uuid: str, own: Readings | None, parent: Readings) -> DeviceSample:
    """The published device `name` on `gpu`: read on its own handle (`own`; None for a partition not created now),
    with what its handle does not give taken from the GPU's primary handle (`parent`)."""
    own = own if own is not None else Readings()
    borrowed: list[str] = []

    def pick(reading: str) -> Any:
        value = getattr(own, reading)
        if value is None and getattr(parent, reading) is not None and own is not parent:
            borrowed.append(reading)
            return getattr(parent, reading)
        return value

    power, temperature = pick("power_watts"), pick("temperature_celsius")
    return DeviceSample(
        device=name, uuid=uuid, pci_bus_id=gpu.bdf, model=product_name(gpu.sysfs_product_name or gpu.market_name),
        utilization=own.utilization, memory_used_bytes=own.memory_used, memory_total_bytes=own.memory_total,
        power_watts=power, temperature_celsius=temperature, errors=dict(parent.errors),
        per_parent=(*borrowed, "errors") if own is not parent else (),
    )  # fmt: skip


def partition_address(gpu_bdf: str, index: int) -> str:
    """amd-smi lists partition k of 0000:0c:00.0 as 0000:0c:00.k."""
    return f"{gpu_bdf.rsplit('.', 1)[0]}.{index}"

