"""A simulated HLML library: the pyhlml functions hlml.Hlml calls, fed by a profile.

It replaces only the library object (as the real `pyhlml` module would be
passed); hlml.Hlml runs unchanged on top. Critical errors are injected with
inject_critical_error(bdf).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from dra_driver_gaudi.hlml import ERROR_TIMEOUT, EVENT_CRITICAL_ERR


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


class FakeHlml:
    def __init__(self, serials: Mapping[str, str], memory: Mapping[str, int] | None = None) -> None:
        self._serials = dict(serials)
        self._memory = dict(memory or {})
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
        bdf = self._bdf(handle)
        if bdf not in self._memory:
            raise FakeHlmlError(3)  # HLML_ERROR_NOT_SUPPORTED
        return FakeMemory(total=self._memory[bdf], free=self._memory[bdf])

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
