"""GPU health from NVML events: XID critical errors and lost GPUs become device taints.

Follows the NVIDIA DRA driver: taint key `gpu.nvidia.com/xid` (value = the XID)
and `gpu.nvidia.com/gpu-lost`, effect NoSchedule (new pods avoid the device;
running ones are not evicted by the driver, an admin's DeviceTaintRule can).
XIDs caused by applications (13, 31, 43, 45, 68, 109, plus ADDITIONAL_XIDS_TO_IGNORE)
do not make a device unhealthy.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import pynvml

from dra_driver.common.logs import fields
from dra_driver.model.device import DeviceTaint
from dra_driver.backend.interface import HealthEvent
from dra_driver_nvidia import nvml
from dra_driver_nvidia.discovery import GpuInfo
from dra_driver_nvidia.nvml import NvmlError

log = logging.getLogger(__name__)

XID_TAINT = "gpu.nvidia.com/xid"
GPU_LOST_TAINT = "gpu.nvidia.com/gpu-lost"
TAINT_EFFECT: Final = "NoSchedule"
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
NO_INSTANCE = 0xFFFFFFFF
WAIT_MS = 1000  # short, so `stop` is honoured within a second
WATCHED_EVENTS = (
    pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError
)
XID_MEANINGS = {
    48: "double-bit ECC error",
    63: "row remapping event",
    64: "row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
}

# (parent GPU uuid, GI id or None for the whole GPU) -> affected device names
DeviceResolver = Callable[[str, int | None], list[str]]


def ignored_xids(environ: dict[str, str] | None = None) -> frozenset[int]:
    """Application XIDs plus the comma-separated ADDITIONAL_XIDS_TO_IGNORE (upstream's variable)."""
    raw = (environ if environ is not None else dict(os.environ)).get("ADDITIONAL_XIDS_TO_IGNORE", "")
    extra = set()
    for item in raw.split(","):
        if item.strip():
            try:
                extra.add(int(item.strip()))
            except ValueError:
                log.warning("ignoring a non-numeric entry of ADDITIONAL_XIDS_TO_IGNORE", extra=fields(entry=item))
    return APPLICATION_XIDS | extra


@dataclass
class HealthWatcher:
    gpus: Sequence[GpuInfo]
    resolve: DeviceResolver
    all_devices: Callable[[], list[str]]
    ignore: frozenset[int] = APPLICATION_XIDS
    on_xid: Callable[[str], None] | None = None  # told the GPU uuid of every XID event, ignored ones too (the xid counter)

    def _register(self, event_set: nvml.Handle) -> dict[int | None, GpuInfo]:
        watched: dict[int | None, GpuInfo] = {}
        for gpu in self.gpus:
            try:
                mask = nvml.supported_event_types(gpu.handle) & WATCHED_EVENTS
                nvml.register_events(gpu.handle, mask, event_set)
            except NvmlError as exc:
                log.warning("GPU health is not monitored", extra=fields(gpu=gpu.name, call=exc.call, error=exc.detail))
                continue
            watched[nvml.handle_address(gpu.handle)] = gpu
        return watched

    def events(self, stop: threading.Event) -> Iterator[HealthEvent]:
        """Register for events now (so nothing after this call is missed), then iterate lazily."""
        event_set = nvml.event_set_create()
        try:
            watched = self._register(event_set)
        except BaseException:
            nvml.event_set_free(event_set)
            raise
        return self._loop(event_set, watched, stop)

    def _loop(self, event_set: nvml.Handle, watched: dict[int | None, GpuInfo], stop: threading.Event) -> Iterator[HealthEvent]:
        try:
            while not stop.is_set():
                try:
                    event = nvml.event_set_wait(event_set, WAIT_MS)
                except NvmlError as exc:
                    if exc.timeout:
                        continue
                    if exc.gpu_lost:
                        yield from self._gpu_lost()
                        continue
                    log.warning("waiting for NVML events failed", extra=fields(error=str(exc)))
                    stop.wait(1.0)
                    continue
                yield from self._handle(event, watched)
        finally:
            try:
                nvml.event_set_free(event_set)
            except NvmlError as exc:
                log.debug("freeing the NVML event set failed", extra=fields(error=str(exc)))

    def _gpu_lost(self) -> Iterator[HealthEvent]:
        # NVML does not say which GPU is gone, so every device is suspect (upstream does the same).
        taint = DeviceTaint(key=GPU_LOST_TAINT, effect=TAINT_EFFECT)
        for device in self.all_devices():
            yield HealthEvent(device=device, healthy=False, reason="GPU is lost (NVML_ERROR_GPU_IS_LOST)", taint=taint)

    def _handle(self, event: nvml.Event, watched: dict[int | None, GpuInfo]) -> Iterator[HealthEvent]:
        if not event.event_type & pynvml.nvmlEventTypeXidCriticalError:
            return
        gpu = watched.get(event.device_address)
        if gpu is None:
            log.warning("XID event from an unknown device", extra=fields(xid=event.data))
            return
        xid = event.data
        if self.on_xid is not None:
            self.on_xid(gpu.uuid)
        if xid in self.ignore:
            log.info("application XID ignored", extra=fields(gpu=gpu.name, xid=xid))
            return
        gi_id = None if event.gpu_instance_id == NO_INSTANCE else event.gpu_instance_id
        meaning = XID_MEANINGS.get(xid)
        reason = f"XID {xid}" + (f" ({meaning})" if meaning else "")
        taint = DeviceTaint(key=XID_TAINT, effect=TAINT_EFFECT, value=str(xid))
        for device in self.resolve(gpu.uuid, gi_id):
            yield HealthEvent(device=device, healthy=False, reason=reason, taint=taint)
