"""The only module that talks to amdsmi: a guarded import and thin, typed calls.

amdsmi is an optional extra (`pip install dra-driver[amd]`). Importing it on a
host without libamd_smi.so raises KeyError('libamd_smi.so') rather than
ImportError and prints two lines to stdout (amdsmi 7.0.2 amdsmi_wrapper.py),
which would corrupt `discover -o json`; both are contained here. Everything
above this module gets plain values or SmiError, and never the library object,
so a simulated module (fake_amdsmi.FakeAmdSmi) can stand in for the real one.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
from collections.abc import Iterable, Sequence
from typing import Any, TypeGuard

from dra_driver.common.errors import BackendUnavailable
from dra_driver.common.logs import fields

log = logging.getLogger(__name__)

VENDOR = "amd"
NOT_INSTALLED = "amdsmi Python package not installed (pip install dra-driver[amd])"
LIBRARY_MISSING = "libamd_smi.so not found (install amd-smi-lib from ROCm, or set ROCM_PATH)"
STATUS_NOT_SUPPORTED = 2


def _number(value: Any) -> TypeGuard[int | float]:
    """A reading amdsmi gave (it writes "N/A" for a field the GPU does not fill; UINT32_MAX is unsupported)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 0xFFFFFFFF


class SmiError(Exception):
    """An amdsmi call failed; `code` is the amdsmi status (2 = not supported)."""

    def __init__(self, call: str, code: int | None, detail: str) -> None:
        self.call = call
        self.code = code
        # amdsmi's messages span lines ("Error code:\n\t34 | ..."); keep errors on one line.
        super().__init__(f"{call} failed: {' '.join(detail.split()) or 'unknown error'}")

    @property
    def unsupported(self) -> bool:
        return self.code == STATUS_NOT_SUPPORTED


def import_amdsmi() -> Any:
    """The real amdsmi module, or BackendUnavailable with a plain reason."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            return importlib.import_module("amdsmi")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "amdsmi":
            raise BackendUnavailable(VENDOR, NOT_INSTALLED) from exc
        raise BackendUnavailable(VENDOR, f"amdsmi cannot be imported: {exc}") from exc
    except (KeyError, OSError) as exc:
        # amdsmi_wrapper looks the library up in a dict after failing to load it.
        log.debug("amdsmi import output", extra=fields(output=printed.getvalue().strip(), error=repr(exc)))
        raise BackendUnavailable(VENDOR, LIBRARY_MISSING) from exc
    except ImportError as exc:
        raise BackendUnavailable(VENDOR, f"amdsmi cannot be imported: {exc}") from exc


class Smi:
    """Calls into an amdsmi module object (real or simulated) with errors made uniform."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self.lib, name)(*args)
        except self.lib.AmdSmiException as exc:
            code = exc.get_error_code() if hasattr(exc, "get_error_code") else None
            raise SmiError(name, code, str(exc)) from exc

    def _optional(self, name: str, *args: Any) -> Any:
        """The call's result, or None where the GPU does not support it."""
        try:
            return self._call(name, *args)
        except SmiError as exc:
            if exc.unsupported:
                return None
            raise

    # lifetime
    def init(self) -> None:
        self._call("amdsmi_init", self.lib.AmdSmiInitFlags.INIT_AMD_GPUS)

    def shutdown(self) -> None:
        self._call("amdsmi_shut_down")

    def processor_handles(self) -> list[Any]:
        return list(self._call("amdsmi_get_processor_handles"))

    # identity
    def bdf(self, handle: Any) -> str:
        return str(self._call("amdsmi_get_gpu_device_bdf", handle)).lower()

    def uuid(self, handle: Any) -> str | None:
        return self._optional("amdsmi_get_gpu_device_uuid", handle)

    def asic_info(self, handle: Any) -> dict[str, Any]:
        return dict(self._call("amdsmi_get_gpu_asic_info", handle))

    def vram_info(self, handle: Any) -> dict[str, Any]:
        return dict(self._call("amdsmi_get_gpu_vram_info", handle))

    def driver_info(self, handle: Any) -> dict[str, Any]:
        return dict(self._call("amdsmi_get_gpu_driver_info", handle))

    def kfd_info(self, handle: Any) -> dict[str, Any]:
        return dict(self._call("amdsmi_get_gpu_kfd_info", handle))

    def enumeration_info(self, handle: Any) -> dict[str, Any]:
        return dict(self._call("amdsmi_get_gpu_enumeration_info", handle))

    def numa_node(self, handle: Any) -> int | None:
        value = self._optional("amdsmi_topo_get_numa_node_number", handle)
        return value if isinstance(value, int) else None

    # partitions
    def compute_partition(self, handle: Any) -> str | None:
        value = self._optional("amdsmi_get_gpu_compute_partition", handle)
        return str(value).upper() if value else None

    def memory_partition(self, handle: Any) -> str | None:
        value = self._optional("amdsmi_get_gpu_memory_partition", handle)
        return str(value).upper() if value else None

    def memory_partition_caps(self, handle: Any) -> list[str] | None:
        config = self._optional("amdsmi_get_gpu_memory_partition_config", handle)
        if config is None:
            return None
        return [cap for cap in config.get("partition_caps", []) if cap != "N/A"]

    def accelerator_profiles(self, handle: Any) -> dict[str, Any] | None:
        return self._optional("amdsmi_get_gpu_accelerator_partition_profile_config", handle)

    def set_compute_partition(self, handle: Any, mode: str) -> None:
        self._call("amdsmi_set_gpu_compute_partition", handle, self.lib.AmdSmiComputePartitionType[mode])

    def set_memory_partition(self, handle: Any, mode: str) -> None:
        self._call("amdsmi_set_gpu_memory_partition", handle, self.lib.AmdSmiMemoryPartitionType[mode])

    # XGMI
    def xgmi_hive_id(self, handle: Any) -> int:
        """The XGMI hive id, 0 when the GPU is not in a hive."""
        info = self._optional("amdsmi_get_xgmi_info", handle)
        hive = info.get("xgmi_hive_id") if info else 0
        return hive if isinstance(hive, int) else 0

    def is_xgmi_neighbour(self, src: Any, dst: Any) -> bool:
        """True when src reaches dst over one direct XGMI link."""
        link = self._optional("amdsmi_topo_get_link_type", src, dst)
        if not link:
            return False
        return link.get("type") == int(self.lib.AmdSmiLinkType.AMDSMI_LINK_TYPE_XGMI) and link.get("hops") == 1

    # health
    def uncorrectable_ecc(self, handle: Any) -> int | None:
        counts = self._optional("amdsmi_get_gpu_total_ecc_count", handle)
        value = counts.get("uncorrectable_count") if counts else None
        return value if isinstance(value, int) else None

    # readings (device metrics); None where the GPU or partition does not report one
    def activity(self, handle: Any) -> float | None:
        """GFX engine activity 0..1 (the `gfx_activity` percentage amd-smi shows as GFX%)."""
        value = (self._optional("amdsmi_get_gpu_activity", handle) or {}).get("gfx_activity")
        return value / 100 if _number(value) else None

    def vram_usage(self, handle: Any) -> tuple[int, int] | None:
        """(used, total) VRAM in bytes; amdsmi reports MB (MiB)."""
        usage = self._optional("amdsmi_get_gpu_vram_usage", handle) or {}
        used, total = usage.get("vram_used"), usage.get("vram_total")
        return (int(used) << 20, int(total) << 20) if _number(used) and _number(total) and total > 0 else None

    def power_watts(self, handle: Any) -> float | None:
        """Socket power: the current power on MI300 and later, the average on MI200 and earlier ("N/A": not this one)."""
        info = self._optional("amdsmi_get_power_info", handle) or {}
        value = next((info[key] for key in ("current_socket_power", "average_socket_power", "socket_power") if _number(info.get(key))), None)
        return float(value) if value is not None else None

    def hotspot_celsius(self, handle: Any) -> float | None:
        """The junction (hotspot) temperature: MI300 reports no edge sensor, and it is what throttles."""
        value = self._optional("amdsmi_get_temp_metric", handle, self.lib.AmdSmiTemperatureType.HOTSPOT, self.lib.AmdSmiTemperatureMetric.CURRENT)
        return float(value) if _number(value) else None

    def ecc_counts(self, handle: Any) -> dict[str, int] | None:
        """RAS error counts since the driver loaded: ecc_corrected, ecc_uncorrected, ecc_deferred."""
        counts = self._optional("amdsmi_get_gpu_total_ecc_count", handle)
        if counts is None:
            return None
        names = {"correctable_count": "ecc_corrected", "uncorrectable_count": "ecc_uncorrected", "deferred_count": "ecc_deferred"}
        return {kind: int(counts[key]) for key, kind in names.items() if _number(counts.get(key))}

    def event_readers(self, handles: Sequence[Any], event_names: Iterable[str]) -> list[Any]:
        types = [self.lib.AmdSmiEvtNotificationType[name] for name in event_names]
        readers = []
        for handle in handles:
            try:
                readers.append(self.lib.AmdSmiEventReader(handle, types))
            except self.lib.AmdSmiException as exc:
                log.warning("cannot watch amdsmi events", extra=fields(error=str(exc)))
        return readers

    def read_events(self, reader: Any, timeout_ms: int) -> list[dict[str, Any]]:
        try:
            return list(reader.read(timeout_ms))
        except self.lib.AmdSmiException as exc:
            code = exc.get_error_code() if hasattr(exc, "get_error_code") else None
            raise SmiError("AmdSmiEventReader.read", code, str(exc)) from exc

    def stop_reader(self, reader: Any) -> None:
        with contextlib.suppress(self.lib.AmdSmiException):
            reader.stop()
