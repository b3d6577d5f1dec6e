"""Read-only NVML dump used to check the simulated profiles against a real GPU.

Calls only getters (no MIG mode change, no clocks, no reset). Prints JSON.
Usage: python3 scripts/nvml_probe.py > probe.json
"""

from __future__ import annotations

import ctypes
import json
import sys
from typing import Any

import pynvml as nv


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except nv.NVMLError as exc:
        return f"error: {exc}"


def _struct(obj: Any) -> Any:
    if hasattr(obj, "_fields_"):
        return {name: _struct(getattr(obj, name)) for name, *_ in obj._fields_}
    if isinstance(obj, bytes):
        return obj.hex()
    if isinstance(obj, ctypes.Array):
        return [_struct(x) for x in obj]
    return obj


def gi_profiles(handle: Any) -> list[dict[str, Any]]:
    out = []
    for profile in range(nv.NVML_GPU_INSTANCE_PROFILE_COUNT):
        info = _try(nv.nvmlDeviceGetGpuInstanceProfileInfo, handle, profile, 2)
        if isinstance(info, str):
            out.append({"profile": profile, "info": info})
            continue
        count = ctypes.c_uint(0)
        placements = (nv.c_nvmlGpuInstancePlacement_t * 8)()
        where: list[dict[str, Any]] | str
        try:
            nv.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, placements, ctypes.byref(count))
            where = [{"start": placements[i].start, "size": placements[i].size} for i in range(count.value)]
        except nv.NVMLError as exc:
            where = f"error: {exc}"
        out.append({"profile": profile, "info": _struct(info), "placements": where})
    return out


def device(index: int) -> dict[str, Any]:
    h = nv.nvmlDeviceGetHandleByIndex(index)
    links = []
    for link in range(nv.NVML_NVLINK_MAX_LINKS):
        state = _try(nv.nvmlDeviceGetNvLinkState, h, link)
        if isinstance(state, str):
            links.append({"link": link, "state": state})
            break
        links.append({"link": link, "state": state, "version": _try(nv.nvmlDeviceGetNvLinkVersion, h, link)})
    fabric: Any
    try:
        info = nv.c_nvmlGpuFabricInfo_v2_t()
        nv.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))
        fabric = _struct(info)
    except (nv.NVMLError, AttributeError) as exc:
        fabric = f"error: {exc}"
    mem = _try(nv.nvmlDeviceGetMemoryInfo, h)
    return {
        "index": index,
        "name": _try(nv.nvmlDeviceGetName, h),
        "uuid": _try(nv.nvmlDeviceGetUUID, h),
        "serial": _try(nv.nvmlDeviceGetSerial, h),
        "brand": _try(nv.nvmlDeviceGetBrand, h),
        "architecture": _try(nv.nvmlDeviceGetArchitecture, h),
        "cudaComputeCapability": _try(nv.nvmlDeviceGetCudaComputeCapability, h),
        "minor": _try(nv.nvmlDeviceGetMinorNumber, h),
        "pci": _struct(_try(nv.nvmlDeviceGetPciInfo, h)),
        "memory": _struct(mem),
        "migMode": _try(nv.nvmlDeviceGetMigMode, h),
        "maxMigDevices": _try(nv.nvmlDeviceGetMaxMigDeviceCount, h),
        "numaNode": _try(nv.nvmlDeviceGetNumaNodeId, h) if hasattr(nv, "nvmlDeviceGetNumaNodeId") else "n/a",
        "multiprocessors": _try(lambda: nv.nvmlDeviceGetAttributes(h).multiprocessorCount) if hasattr(nv, "nvmlDeviceGetAttributes") else "n/a",
        "nvlink": links,
        "fabric": fabric,
        "supportedEvents": _try(nv.nvmlDeviceGetSupportedEventTypes, h),
        "giProfiles": gi_profiles(h),
    }


def main() -> int:
    nv.nvmlInit()
    try:
        report = {
            "pynvml": getattr(nv, "__version__", "?"),
            "driverVersion": _try(nv.nvmlSystemGetDriverVersion),
            "cudaDriverVersion": _try(nv.nvmlSystemGetCudaDriverVersion),
            "nvmlVersion": _try(nv.nvmlSystemGetNVMLVersion),
            "count": nv.nvmlDeviceGetCount(),
        }
        report["devices"] = [device(i) for i in range(report["count"])]
    finally:
        nv.nvmlShutdown()
    json.dump(report, sys.stdout, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
