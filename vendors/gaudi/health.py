"""Device health from HLML critical errors (when available) and the sysfs `status` file.

A device is unhealthy while its status is not "Operational" (habanalabs sysfs ABI:
"In reset", "Disabled", "Needs reset", ...) or after an HLML critical error
until the driver has hard-reset it (hard_reset_cnt changed). The taint matches
Intel's driver: key gaudi.intel.com/unhealthy, effect NoExecute, value
CriticalError for HLML events and the status in CamelCase (a taint value must
be a label value, so "In reset" becomes "InReset").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from dra_driver.backend import sysfs as sysfs_util
from dra_driver.common.logs import fields
from dra_driver.model.device import DeviceTaint
from dra_driver.backend.interface import HealthEvent

from dra_driver_gaudi.discovery import GaudiDevice
from dra_driver_gaudi.hlml import Hlml

log = logging.getLogger(__name__)

TAINT_KEY = "gaudi.intel.com/unhealthy"
CRITICAL_ERROR = "CriticalError"
OPERATIONAL = "operational"
DEFAULT_INTERVAL_S = 10.0  # Intel's health tick


@dataclass(frozen=True)
class Verdict:
    healthy: bool
    reason: str
    taint_value: str = ""

    def taint(self) -> DeviceTaint | None:
        return None if self.healthy else DeviceTaint(key=TAINT_KEY, value=self.taint_value, effect="NoExecute")


HEALTHY = Verdict(True, "operational")


def status_verdict(status: str | None) -> Verdict:
    """None (no status file, e.g. Intel's fake trees) counts as healthy: there is no evidence otherwise."""
    if status is None or status.lower() == OPERATIONAL:
        return HEALTHY
    value = "".join(word[:1].upper() + word[1:] for word in status.split() if word.isalnum()) or "Unknown"
    return Verdict(False, f"sysfs status is {status!r}", value[:63])


class HealthState:
    """Critical errors seen so far, shared by the health watcher and discovery."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._critical: dict[str, int | None] = {}  # bdf -> hard_reset_cnt when the error came

    def mark_critical(self, device: GaudiDevice) -> None:
        with self._lock:
            self._critical[device.bdf] = sysfs_util.read_int(device.sysfs_dir / "hard_reset_cnt")

    def verdict(self, device: GaudiDevice) -> Verdict:
        with self._lock:
            if device.bdf in self._critical:
                before = self._critical[device.bdf]
                now = sysfs_util.read_int(device.sysfs_dir / "hard_reset_cnt")
                if now is not None and now != before:
                    del self._critical[device.bdf]  # the driver reset the device since the error
                    log.info("device was reset after a critical error", extra=fields(device=device.bdf))
                else:
                    return Verdict(False, "HLML critical error", CRITICAL_ERROR)
        return status_verdict(sysfs_util.read_text(device.sysfs_dir / "status"))


def _event(device: GaudiDevice, verdict: Verdict) -> HealthEvent:
    return HealthEvent(device=device.name, healthy=verdict.healthy, reason=verdict.reason, taint=verdict.taint())


def watch(
    devices: Callable[[], Sequence[GaudiDevice]],
    state: HealthState,
    hlml: Hlml | None,
    stop: threading.Event,
    interval_s: float = DEFAULT_INTERVAL_S,
) -> Iterator[HealthEvent]:
    """Yield a HealthEvent whenever a device's verdict changes, until `stop` is set.

    Every device starts as healthy, so the first pass reports the unhealthy ones.
    With HLML events, the wait for an event is the pause between passes.
    """
    last: dict[str, Verdict] = {}
    while not stop.is_set():
        current = list(devices())
        for device in current:
            verdict = state.verdict(device)
            if last.get(device.name, HEALTHY) != verdict:
                last[device.name] = verdict
                log.info("device health changed", extra=fields(device=device.name, healthy=verdict.healthy, reason=verdict.reason))
                yield _event(device, verdict)
        if hlml is not None and hlml.events_enabled:
            bdf = hlml.wait_critical(int(interval_s * 1000))
            for device in current:
                if device.bdf == bdf:
                    state.mark_critical(device)
        else:
            stop.wait(interval_s)
