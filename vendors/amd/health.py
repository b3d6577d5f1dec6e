"""Health of AMD GPUs: resets (amdsmi event notifications) and uncorrectable ECC errors.

A GPU_PRE_RESET event or a rise of the RAS uncorrectable ECC count makes every
device of that GPU (the GPU, its partitions, its dynamic placements) unhealthy,
tainted `gpu.amd.com/unhealthy:NoSchedule`. GPU_POST_RESET clears it: after a
reset the GPU is usable again, and the ECC count seen then becomes the new
baseline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.common.logs import fields
from dra_driver.model.device import DeviceTaint
from dra_driver.backend.interface import HealthEvent

from dra_driver_amd.discovery import parent_bdf
from dra_driver_amd.smi import Smi, SmiError

log = logging.getLogger(__name__)

TAINT_KEY = "gpu.amd.com/unhealthy"
PRE_RESET = "GPU_PRE_RESET"
POST_RESET = "GPU_POST_RESET"
REASON_RESET = "GPUReset"
REASON_ECC = "UncorrectableECC"
EVENT_WAIT_S = 1.0  # one event read blocks at most this long, so `stop` is honoured within a second


@dataclass
class GpuHealth:
    """What the watcher knows about one GPU."""

    handle: Any
    ecc_baseline: int
    unhealthy: str | None = None  # taint value while unhealthy


@dataclass
class HealthWatcher:
    smi: Smi
    handles: Mapping[str, Any]  # GPU BDF -> primary processor handle
    devices_of: Callable[[str], Sequence[str]]  # GPU BDF -> device names to report
    poll_s: float = 5.0
    _gpus: dict[str, GpuHealth] = field(default_factory=dict)

    def _events(self, bdf: str, healthy: bool, value: str, reason: str) -> list[HealthEvent]:
        taint = None if healthy else DeviceTaint(key=TAINT_KEY, effect="NoSchedule", value=value)
        return [HealthEvent(device=name, healthy=healthy, reason=reason, taint=taint) for name in self.devices_of(bdf)]

    def _mark_unhealthy(self, bdf: str, value: str, reason: str) -> list[HealthEvent]:
        gpu = self._gpus.get(bdf)
        if gpu is None or gpu.unhealthy is not None:
            return []
        gpu.unhealthy = value
        log.warning("AMD GPU unhealthy", extra=fields(bdf=bdf, reason=reason))
        return self._events(bdf, healthy=False, value=value, reason=reason)

    def _mark_recovered(self, bdf: str) -> list[HealthEvent]:
        gpu = self._gpus.get(bdf)
        if gpu is None:
            return []
        count = self._ecc(bdf)
        if count is not None:
            gpu.ecc_baseline = count
        if gpu.unhealthy is None:
            return []
        gpu.unhealthy = None
        log.info("AMD GPU healthy again after reset", extra=fields(bdf=bdf))
        return self._events(bdf, healthy=True, value="", reason="GPU reset completed")

    def _ecc(self, bdf: str) -> int | None:
        try:
            return self.smi.uncorrectable_ecc(self._gpus[bdf].handle)
        except SmiError as exc:
            log.debug("cannot read ECC count", extra=fields(bdf=bdf, error=str(exc)))
            return None

    def _check_ecc(self) -> list[HealthEvent]:
        events: list[HealthEvent] = []
        for bdf, gpu in self._gpus.items():
            count = self._ecc(bdf)
            if count is not None and count > gpu.ecc_baseline:
                events += self._mark_unhealthy(bdf, REASON_ECC, f"{count - gpu.ecc_baseline} new uncorrectable ECC error(s)")
        return events

    def _handle_event(self, event: Mapping[str, Any]) -> list[HealthEvent]:
        try:
            bdf = parent_bdf(self.smi.bdf(event["processor_handle"]))
        except (SmiError, KeyError) as exc:
            log.warning("amdsmi event for an unknown processor", extra=fields(error=str(exc)))
            return []
        kind = event.get("event")
        if kind == PRE_RESET:
            message = str(event.get("message") or "").strip()
            return self._mark_unhealthy(bdf, REASON_RESET, "GPU reset" + (f": {message}" if message else ""))
        if kind == POST_RESET:
            return self._mark_recovered(bdf)
        return []

    def prime(self) -> None:
        """Take the ECC baselines now, so errors from before the watch began are not reported."""
        for bdf, handle in self.handles.items():
            self._gpus[bdf] = GpuHealth(handle, 0)
            self._gpus[bdf].ecc_baseline = self._ecc(bdf) or 0

    def run(self, stop: threading.Event) -> Iterator[HealthEvent]:
        if not self._gpus:
            self.prime()
        readers = self.smi.event_readers(list(self.handles.values()), [PRE_RESET, POST_RESET])
        # The library's event queue is global: reading through one reader returns every GPU's events.
        reader = readers[0] if readers else None
        next_ecc = time.monotonic() + self.poll_s
        try:
            while not stop.is_set():
                # Reset events as they come; the ECC counters every poll_s (and after events, which may explain them).
                wait_s = max(0.0, min(EVENT_WAIT_S, next_ecc - time.monotonic()))
                events: list[dict[str, Any]] = []
                if reader is not None:
                    try:
                        events = self.smi.read_events(reader, int(wait_s * 1000))
                    except SmiError as exc:
                        log.warning("reading amdsmi events failed; polling ECC only", extra=fields(error=str(exc)))
                        reader = None
                else:
                    stop.wait(wait_s)
                for event in events:
                    yield from self._handle_event(event)
                if not stop.is_set() and (events or time.monotonic() >= next_ecc):
                    yield from self._check_ecc()
                    next_ecc = time.monotonic() + self.poll_s
        finally:
            for each in readers:
                self.smi.stop_reader(each)
