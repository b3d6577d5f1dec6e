"""Optional HLML access through `habana-pyhlml` (serial numbers, critical-error events).

The package is an optional extra (`pip install dra-driver[gaudi]`); it is
imported lazily so the backend runs without it. The library object is the
`pyhlml` module itself, or any object with the same functions (the simulated
HLML in fake_hlml). Only the handful of calls below are used.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from dra_driver.backend.interface import DeviceReadings
from dra_driver.common.logs import fields

log = logging.getLogger(__name__)

# hlml_types.HLML_DEFINE.HLML_EVENT_CRITICAL_ERR; a bit mask like NVML's event types.
EVENT_CRITICAL_ERR = 1 << 1
# hlml_types.HLML_RETURN.HLML_ERROR_TIMEOUT: hlmlEventSetWait found no event in time.
ERROR_TIMEOUT = 10

# pyhlml's argument values: hlmlDeviceGetTemperature sensor (0 AIP, 1 board), hlmlDeviceGetTotalECCErrors
# error type (0 corrected, 1 uncorrected) and counter type (0 volatile, 1 aggregate).
TEMPERATURE_ON_AIP = 0
ECC_CORRECTED, ECC_UNCORRECTED = 0, 1
ECC_AGGREGATE = 1

_missing_logged = threading.Event()


HlmlReadings = DeviceReadings  # one readings type for every vendor (dra_driver.backend.interface)


def import_pyhlml() -> Any | None:
    """The pyhlml module, or None (logged once at info) when the extra is not installed."""
    try:
        return importlib.import_module("pyhlml")
    except ImportError:
        if not _missing_logged.is_set():
            _missing_logged.set()
            log.info("habana-pyhlml is not installed: serial numbers are empty and health comes from sysfs status only")
        return None


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return str(value).strip("\x00 \n")


def _handle_key(handle: Any) -> Any:
    # pyhlml handles are ctypes c_void_p; events carry the raw pointer value.
    return getattr(handle, "value", handle)


class Hlml:
    """An initialised HLML session for the given PCI functions."""

    def __init__(self, library: Any, bdfs: Iterable[str]) -> None:
        self._lib = library
        self._lib.hlmlInit()
        self._handles: dict[str, Any] = {}
        self._by_key: dict[Any, str] = {}
        for bdf in bdfs:
            try:
                handle = self._lib.hlmlDeviceGetHandleByPCIBusID(bdf)
            except Exception as exc:  # one device unknown to HLML must not hide the others
                log.warning("HLML has no handle for device", extra=fields(device=bdf, error=str(exc)))
                continue
            self._handles[bdf] = handle
            self._by_key[_handle_key(handle)] = bdf
        self._event_set: Any = None
        # Register at once: HLML only delivers events that happen after registration.
        self._register_events()

    def has(self, bdf: str) -> bool:
        return bdf in self._handles

    def serial(self, bdf: str) -> str:
        if bdf not in self._handles:
            return ""
        try:
            return _text(self._lib.hlmlDeviceGetSerial(self._handles[bdf]))
        except Exception as exc:
            log.warning("HLML cannot read the serial number", extra=fields(device=bdf, error=str(exc)))
            return ""

    def memory_total(self, bdf: str) -> int | None:
        if bdf not in self._handles:
            return None
        try:
            total = int(self._lib.hlmlDeviceGetMemoryInfo(self._handles[bdf]).total)
        except Exception as exc:
            log.info("HLML cannot read memory info", extra=fields(device=bdf, error=str(exc)))
            return None
        return total if total > 0 else None

    def readings(self, bdf: str) -> HlmlReadings:
        """The device's readings now; each call that fails leaves its reading out (logged at debug)."""
        handle = self._handles.get(bdf)
        if handle is None:
            return HlmlReadings()
        lib = self._lib

        def read(what: str, call: Callable[[], Any]) -> Any:
            try:
                return call()
            except Exception as exc:  # pyhlml raises HLMLError subclasses; NOT_SUPPORTED included
                log.debug("HLML reading failed", extra=fields(device=bdf, reading=what, error=str(exc)))
                return None

        found = HlmlReadings()
        utilization = read("utilization", lambda: lib.hlmlDeviceGetUtilizationRates(handle))  # AIP busy %, last second
        found.utilization = min(1.0, int(utilization) / 100) if utilization is not None else None
        memory = read("memory", lambda: lib.hlmlDeviceGetMemoryInfo(handle))
        if memory is not None and int(memory.total) > 0:
            found.memory_used, found.memory_total = int(memory.used), int(memory.total)
        power = read("power", lambda: lib.hlmlDeviceGetPowerUsage(handle))  # mW
        found.power_watts = int(power) / 1000 if power is not None else None
        temperature = read("temperature", lambda: lib.hlmlDeviceGetTemperature(handle, TEMPERATURE_ON_AIP))
        found.temperature_celsius = float(temperature) if temperature is not None else None
        for kind, error_type in (("ecc_corrected", ECC_CORRECTED), ("ecc_uncorrected", ECC_UNCORRECTED)):
            count = read(kind, partial(lib.hlmlDeviceGetTotalECCErrors, handle, error_type, ECC_AGGREGATE))
            if count is not None:
                found.errors[kind] = int(count)
        return found

    def _register_events(self) -> None:
        try:
            self._event_set = self._lib.hlmlEventSetCreate()
        except Exception as exc:
            log.warning("cannot create an HLML event set; no critical-error events", extra=fields(error=str(exc)))
            return
        for bdf, handle in self._handles.items():
            try:
                self._lib.hlmlDeviceRegisterEvents(handle, EVENT_CRITICAL_ERR, self._event_set)
            except Exception as exc:
                log.warning("cannot register HLML critical-error events", extra=fields(device=bdf, error=str(exc)))

    @property
    def events_enabled(self) -> bool:
        return self._event_set is not None

    def wait_critical(self, timeout_ms: int) -> str | None:
        """The BDF of a device with a critical error, or None after `timeout_ms` without one."""
        if self._event_set is None:
            return None
        try:
            data = self._lib.hlmlEventSetWait(self._event_set, timeout_ms)
        except Exception as exc:
            if getattr(exc, "value", None) != ERROR_TIMEOUT:
                log.warning("HLML event wait failed", extra=fields(error=str(exc)))
            return None
        if not int(data.event_type) & EVENT_CRITICAL_ERR:
            return None
        bdf = self._by_key.get(_handle_key(data.device))
        if bdf is None:
            log.warning("HLML critical error on a device this backend does not know", extra=fields(handle=str(data.device)))
        return bdf

    def close(self) -> None:
        try:
            if self._event_set is not None:
                self._lib.hlmlEventSetFree(self._event_set)
            self._lib.hlmlShutdown()
        except Exception as exc:  # shutting down is best effort
            log.info("HLML shutdown failed", extra=fields(error=str(exc)))


def open_hlml(bdfs: Iterable[str], library: Any | None = None) -> Hlml | None:
    """An HLML session, or None when pyhlml or libhlml is not available here."""
    lib = library if library is not None else import_pyhlml()
    if lib is None:
        return None
    try:
        return Hlml(lib, bdfs)
    except Exception as exc:  # pyhlml without libhlml.so raises at hlmlInit
        log.info("HLML cannot initialise; serial numbers are empty and health comes from sysfs status", extra=fields(error=str(exc)))
        return None
