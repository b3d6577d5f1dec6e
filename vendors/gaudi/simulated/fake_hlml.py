"""A simulated HLML library: the pyhlml functions hlml.Hlml calls, fed by a profile.

It replaces only the library object (as the real `pyhlml` module would be
passed); hlml.Hlml runs unchanged on top. Critical errors are injected with
inject_critical_error(bdf).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from dra_driver.simulation.load import SimulatedLoad

from dra_driver_gaudi.hlml import ERROR_TIMEOUT, EVENT_CRITICAL_ERR

# Board power limits (W) the simulated power readings scale with: HL-205, HL-225, HL-325L OAM.
POWER_LIMIT_W = {"gaudi": 350, "gaudi2": 600, "gaudi3": 900}


class FakeHlmlError(Exception):
    """Mirrors pyhlml's HLMLError: the HLML return code is in `value`."""

    def __init__(self, value: int) -> None:
        self.value = value
        super().__init__(f"HLML error {value}")


@dataclass(frozen=True)
class FakeHandle:
    value: int  # like ctypes.c_void_p.value


@dataclass(frozen=True)
class FakeMemory:
    total: int
    free: int
    used: int = 0


@dataclass(frozen=True)
class FakeEvent:
    device: int  # raw handle pointer value, as in c_hlml_event_data
    event_type: int


_NOT_FOUND = 6
_UNINITIALIZED = 1
_NOT_SUPPORTED = 3
_UNKNOWN = 49  # HLML_ERROR_UNKNOWN


class FakeHlml:
    def __init__(self, serials: Mapping[str, str], memory: Mapping[str, int] | None = None, power_limit_w: Mapping[str, int] | None = None) -> None:
        self._serials = dict(serials)
        self._memory = dict(memory or {})
        self._power_limit_w = dict(power_limit_w or {})
        self.load = SimulatedLoad(seed="gaudi")  # readings of the metric calls, keyed by PCI address
        self._ecc: dict[tuple[str, int], int] = {}  # (bdf, error type) -> count
        self._failing: dict[str, set[str | None]] = {}  # call -> PCI addresses it fails for (None: every device)
        self._handles = {bdf: FakeHandle(0x1000 + index) for index, bdf in enumerate(sorted(self._serials))}
        self._events: deque[FakeEvent] = deque()
        self._registered: set[int] = set()
        self._ready = threading.Condition()
        self.initialised = False

    def _check(self) -> None:
        if not self.initialised:
            raise FakeHlmlError(_UNINITIALIZED)

    def hlmlInit(self) -> None:
        self.initialised = True

    def hlmlShutdown(self) -> None:
        self.initialised = False

    def hlmlDeviceGetHandleByPCIBusID(self, pci_addr: str) -> FakeHandle:
        self._check()
        if pci_addr not in self._handles:
            raise FakeHlmlError(_NOT_FOUND)
        return self._handles[pci_addr]

    def _bdf(self, handle: FakeHandle) -> str:
        for bdf, candidate in self._handles.items():
            if candidate == handle:
                return bdf
        raise FakeHlmlError(_NOT_FOUND)

    def hlmlDeviceGetSerial(self, handle: FakeHandle) -> str:
        self._check()
        return self._serials[self._bdf(handle)]

    def hlmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> FakeMemory:
        self._check()
        bdf = self._reading("hlmlDeviceGetMemoryInfo", handle)
        if bdf not in self._memory:
            raise FakeHlmlError(_NOT_SUPPORTED)
        total = self._memory[bdf]
        used = min(total, int(total * self.load.current(bdf).memory_fraction))
        return FakeMemory(total=total, free=total - used, used=used)

    # ---- metric calls (readings from self.load: drifting, higher on devices a claim holds) ----

    def _reading(self, call: str, handle: FakeHandle) -> str:
        self._check()
        bdf = self._bdf(handle)
        failing = self._failing.get(call, set())
        if None in failing or bdf in failing:
            raise FakeHlmlError(_UNKNOWN)
        return bdf

    def hlmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> int:
        bdf = self._reading("hlmlDeviceGetUtilizationRates", handle)
        return round(self.load.advance(bdf).utilization * 100)  # the call that moves the device's readings

    def hlmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        bdf = self._reading("hlmlDeviceGetPowerUsage", handle)
        if bdf not in self._power_limit_w:
            raise FakeHlmlError(_NOT_SUPPORTED)
        return round(self.load.current(bdf).power_fraction * self._power_limit_w[bdf] * 1000)  # mW

    def hlmlDeviceGetTemperature(self, handle: FakeHandle, sensor_type: int) -> int:
        bdf = self._reading("hlmlDeviceGetTemperature", handle)
        if sensor_type not in (0, 1):  # HLML_TEMPERATURE_ON_AIP, HLML_TEMPERATURE_ON_BOARD
            raise FakeHlmlError(2)  # HLML_ERROR_INVALID_ARGUMENT
        celsius = self.load.current(bdf).temperature_celsius
        return round(celsius if sensor_type == 0 else celsius - 8)

    def hlmlDeviceGetTotalECCErrors(self, handle: FakeHandle, error_type: int, counter_type: int) -> int:
        bdf = self._reading("hlmlDeviceGetTotalECCErrors", handle)
        return self._ecc.get((bdf, error_type), 0)

    def hlmlEventSetCreate(self) -> object:
        self._check()
        return object()

    def hlmlEventSetFree(self, event_set: object) -> None:
        return None

    def hlmlDeviceRegisterEvents(self, handle: FakeHandle, event_types: int, event_set: object) -> None:
        self._check()
        if event_types & EVENT_CRITICAL_ERR:
            self._registered.add(handle.value)

    def hlmlEventSetWait(self, event_set: object, timeout: int) -> FakeEvent:
        with self._ready:
            if not self._events:
                self._ready.wait(timeout / 1000)
            if not self._events:
                raise FakeHlmlError(ERROR_TIMEOUT)
            return self._events.popleft()

    def set_busy(self, bdfs: Collection[str]) -> None:
        """The devices (by PCI address) that carry a workload now; every other one idles."""
        self.load.set_busy(bdfs)

    def inject_ecc(self, bdf: str, corrected: int = 0, uncorrected: int = 0) -> None:
        for error_type, count in ((0, corrected), (1, uncorrected)):
            self._ecc[(bdf, error_type)] = self._ecc.get((bdf, error_type), 0) + count

    def fail(self, call: str, bdf: str | None = None) -> None:
        """Make a metric call fail with HLML_ERROR_UNKNOWN, for one device or (None) every device."""
        self._failing.setdefault(call, set()).add(bdf)

    def set_memory_total(self, bdf: str, total: int) -> None:
        """Make hlmlDeviceGetMemoryInfo report `total` bytes for the device."""
        self._memory[bdf] = total

    def inject_critical_error(self, bdf: str) -> None:
        """Queue a critical-error event for a device that registered for it."""
        handle = self._handles[bdf]
        if handle.value not in self._registered:
            return  # real HLML delivers only registered event types
        with self._ready:
            self._events.append(FakeEvent(handle.value, EVENT_CRITICAL_ERR))
            self._ready.notify_all()
