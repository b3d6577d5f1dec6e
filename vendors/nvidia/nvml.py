"""Thin wrapper over pynvml: one function per NVML call, errors typed with the call's name.

Every NVMLError becomes NvmlError(call, code), so callers can tell "not
supported on this board" from "GPU is lost" and logs say which call failed.
Values come back as plain Python types and small dataclasses; ctypes stays here.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pynvml

from dra_driver.common.errors import DraError

T = TypeVar("T")
Handle = Any  # nvmlDevice_t / nvmlGpuInstance_t / nvmlComputeInstance_t (opaque pointers)


# nvmlReturn_t value -> symbolic name, from pynvml's own constants (so new codes need no table here).
ERROR_NAMES: dict[int, str] = {
    value: key for key, value in vars(pynvml).items() if key.startswith("NVML_ERROR_") and isinstance(value, int)
}
# What an operator can do about the codes MIG and discovery run into; pynvml has no text for several of them.
ERROR_HINTS: dict[int, str] = {
    pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES: "the placement overlaps an existing GPU instance, or the GPU has no room left for this profile",
    pynvml.NVML_ERROR_IN_USE: "MIG instances or processes still use the GPU",
    pynvml.NVML_ERROR_RESET_REQUIRED: "the change takes effect only after a GPU reset (nvidia-smi -r) or reboot",
    pynvml.NVML_ERROR_INVALID_STATE: "the GPU is not in the state this call needs (MIG mode?)",
    pynvml.NVML_ERROR_NO_PERMISSION: "the plugin needs root (or CAP_SYS_ADMIN) for this call",
    pynvml.NVML_ERROR_GPU_IS_LOST: "the GPU fell off the bus; it needs a reset or a reboot",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "libnvidia-ml and the kernel driver differ in version; reload the driver or reboot",
}


def error_name(code: int) -> str:
    return ERROR_NAMES.get(code, f"NVML_ERROR_{code}")


class NvmlError(DraError):
    """An NVML call failed; `code` is the nvmlReturn_t value; the message names it and hints at a fix."""

    def __init__(self, call: str, code: int, detail: str) -> None:
        self.call = call
        self.code = code
        self.detail = detail
        hint = ERROR_HINTS.get(code)
        super().__init__(f"{call}: {detail} ({error_name(code)}={code}{'; ' + hint if hint else ''})")

    @property
    def not_supported(self) -> bool:
        return self.code in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT)

    @property
    def not_found(self) -> bool:
        return self.code == pynvml.NVML_ERROR_NOT_FOUND

    @property
    def gpu_lost(self) -> bool:
        return self.code == pynvml.NVML_ERROR_GPU_IS_LOST

    @property
    def library_missing(self) -> bool:
        return self.code in (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    @property
    def timeout(self) -> bool:
        return self.code == pynvml.NVML_ERROR_TIMEOUT


def call(fn: Callable[..., T], *args: Any) -> T:
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        code = int(exc.value)
        text = str(exc)
        if text.startswith("NVML Error with code"):  # pynvml has no text for this code: the name says more
            text = error_name(code).removeprefix("NVML_ERROR_").replace("_", " ").lower()
        raise NvmlError(fn.__name__, code, text) from exc


# ---- library and system -------------------------------------------------------


# Where distributions put libnvidia-ml.so.1, relative to the driver root.
LIBRARY_DIRS = ("usr/lib64", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib", "lib64", "lib")
LIBRARY_NAME = "libnvidia-ml.so.1"


def find_library(driver_root: Path) -> Path | None:
    """libnvidia-ml.so.1 under a host driver root mounted into the container, if present."""
    for directory in LIBRARY_DIRS:
        candidate = driver_root / directory / LIBRARY_NAME
        if candidate.exists():
            return candidate
    return None


def load_library(driver_root: Path) -> None:
    """Load NVML from the driver root instead of the dynamic loader's search path.

    Putting the host's library directories on LD_LIBRARY_PATH would make every
    library of the container (libc, libssl, Python's own) resolve from the host;
    loading the one file by path keeps the container's userland intact. pynvml
    skips its own loading when nvmlLib is already set.
    """
    if driver_root == Path("/") or pynvml.nvmlLib is not None:
        return
    path = find_library(driver_root)
    if path is None:
        raise NvmlError(
            "load",
            pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
            f"{LIBRARY_NAME} not found under driver root {driver_root} (looked in {', '.join(LIBRARY_DIRS)})",
        )
    try:
        pynvml.nvmlLib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise NvmlError("load", pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, f"cannot load {path}: {exc}") from exc


def init(driver_root: Path = Path("/")) -> None:
    load_library(driver_root)
    # NO_GPUS: init succeeds on a node whose GPUs are all broken or absent, so we
    # can report "no GPUs" plainly and still publish the healthy ones otherwise.
    call(pynvml.nvmlInitWithFlags, pynvml.NVML_INIT_FLAG_NO_GPUS)


def shutdown() -> None:
    call(pynvml.nvmlShutdown)


def driver_version() -> str:
    return call(pynvml.nvmlSystemGetDriverVersion)


def cuda_driver_version() -> int:
    return call(pynvml.nvmlSystemGetCudaDriverVersion)


def device_count() -> int:
    return call(pynvml.nvmlDeviceGetCount)


# ---- devices ----------------------------------------------------------------


def handle_by_index(index: int) -> Handle:
    return call(pynvml.nvmlDeviceGetHandleByIndex, index)


def name(handle: Handle) -> str:
    return call(pynvml.nvmlDeviceGetName, handle)


def uuid(handle: Handle) -> str:
    return call(pynvml.nvmlDeviceGetUUID, handle)


def minor_number(handle: Handle) -> int:
    return call(pynvml.nvmlDeviceGetMinorNumber, handle)


def index(handle: Handle) -> int:
    return call(pynvml.nvmlDeviceGetIndex, handle)


def brand(handle: Handle) -> int:
    return call(pynvml.nvmlDeviceGetBrand, handle)


def architecture(handle: Handle) -> int:
    return call(pynvml.nvmlDeviceGetArchitecture, handle)


def compute_capability(handle: Handle) -> tuple[int, int]:
    major, minor = call(pynvml.nvmlDeviceGetCudaComputeCapability, handle)
    return int(major), int(minor)


def pci_bus_id(handle: Handle) -> str:
    """NVML's busId, e.g. "00000000:1B:00.0"."""
    bus_id = call(pynvml.nvmlDeviceGetPciInfo, handle).busId
    return bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)


def memory_total(handle: Handle) -> int:
    return int(call(pynvml.nvmlDeviceGetMemoryInfo, handle).total)


def memory_used(handle: Handle) -> tuple[int, int]:
    """(used, total) bytes. nvmlDeviceGetMemoryInfo_v2 first: its `used` leaves out the driver's reserved memory,
    as nvidia-smi's memory.used does (drivers 510 and later); v1 on older drivers (its `used` includes it)."""
    try:
        info = call(pynvml.nvmlDeviceGetMemoryInfo, handle, pynvml.nvmlMemory_v2)
    except NvmlError as exc:
        if not (exc.not_supported or exc.code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
            raise
        info = call(pynvml.nvmlDeviceGetMemoryInfo, handle)
    return int(info.used), int(info.total)


def utilization(handle: Handle) -> float:
    """GPU utilization over the driver's last sample period, 0..1 (NOT_SUPPORTED on a MIG device)."""
    return int(call(pynvml.nvmlDeviceGetUtilizationRates, handle).gpu) / 100.0


def power_watts(handle: Handle) -> float:
    return int(call(pynvml.nvmlDeviceGetPowerUsage, handle)) / 1000.0  # milliwatts


def temperature_celsius(handle: Handle) -> float:
    return float(call(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU))


def ecc_errors(handle: Handle, uncorrected: bool) -> int:
    """Aggregate (lifetime) ECC error count, corrected or uncorrected; NOT_SUPPORTED without ECC."""
    kind = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED if uncorrected else pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    return int(call(pynvml.nvmlDeviceGetTotalEccErrors, handle, kind, pynvml.NVML_AGGREGATE_ECC))


# Compute modes (nvmlComputeMode_t): MPS wants EXCLUSIVE_PROCESS, so that only its server opens the GPU.
COMPUTE_MODE_DEFAULT = pynvml.NVML_COMPUTEMODE_DEFAULT
COMPUTE_MODE_EXCLUSIVE_PROCESS = pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS


def compute_mode(handle: Handle) -> int:
    return int(call(pynvml.nvmlDeviceGetComputeMode, handle))


def set_compute_mode(handle: Handle, mode: int) -> None:
    call(pynvml.nvmlDeviceSetComputeMode, handle, mode)


@dataclass(frozen=True)
class DeviceAttributes:
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    gpu_instance_slices: int
    compute_instance_slices: int
    memory_mb: int


def attributes(handle: Handle) -> DeviceAttributes:
    raw = call(pynvml.nvmlDeviceGetAttributes, handle)
    return DeviceAttributes(
        multiprocessors=raw.multiprocessorCount,
        copy_engines=raw.sharedCopyEngineCount,
        decoders=raw.sharedDecoderCount,
        encoders=raw.sharedEncoderCount,
        jpeg_engines=raw.sharedJpegCount,
        ofa_engines=raw.sharedOfaCount,
        gpu_instance_slices=raw.gpuInstanceSliceCount,
        compute_instance_slices=raw.computeInstanceSliceCount,
        memory_mb=raw.memorySizeMB,
    )


# ---- MIG ----------------------------------------------------------------------


def mig_mode(handle: Handle) -> tuple[int, int]:
    current, pending = call(pynvml.nvmlDeviceGetMigMode, handle)
    return int(current), int(pending)


def set_mig_mode(handle: Handle, enabled: bool) -> int:
    """Request a MIG mode; returns the activation status (NVML_ERROR_RESET_REQUIRED: only pending)."""
    mode = pynvml.NVML_DEVICE_MIG_ENABLE if enabled else pynvml.NVML_DEVICE_MIG_DISABLE
    return int(call(pynvml.nvmlDeviceSetMigMode, handle, mode))


def max_mig_device_count(handle: Handle) -> int:
    return call(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle)


def mig_device_handle(handle: Handle, position: int) -> Handle:
    return call(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, position)


def gpu_instance_id(mig_handle: Handle) -> int:
    return call(pynvml.nvmlDeviceGetGpuInstanceId, mig_handle)


def compute_instance_id(mig_handle: Handle) -> int:
    return call(pynvml.nvmlDeviceGetComputeInstanceId, mig_handle)


@dataclass(frozen=True)
class GpuInstanceProfileInfo:
    """One GPU instance profile as NVML describes it (`nvidia-smi mig -lgip`)."""

    profile: int  # NVML_GPU_INSTANCE_PROFILE_* enum value used to query it
    id: int  # profile ID used by every later call
    name: str  # "1g.10gb" (the "MIG " prefix removed)
    slice_count: int
    instance_count: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    memory_mb: int


def gpu_instance_profile_info(handle: Handle, profile: int) -> GpuInstanceProfileInfo:
    raw = call(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, profile)
    raw_name = raw.name.decode() if isinstance(raw.name, bytes) else str(raw.name)
    return GpuInstanceProfileInfo(
        profile=profile,
        id=raw.id,
        name=raw_name.removeprefix("MIG ").strip(),
        slice_count=raw.sliceCount,
        instance_count=raw.instanceCount,
        multiprocessors=raw.multiprocessorCount,
        copy_engines=raw.copyEngineCount,
        decoders=raw.decoderCount,
        encoders=raw.encoderCount,
        jpeg_engines=raw.jpegCount,
        ofa_engines=raw.ofaCount,
        memory_mb=raw.memorySizeMB,
    )


@dataclass(frozen=True, order=True)
class Placement:
    start: int  # in memory slices
    size: int


def gpu_instance_possible_placements(handle: Handle, profile_id: int) -> list[Placement]:
    count = ctypes.c_uint(0)
    call(pynvml.nvmlDeviceGetGpuInstancePossiblePlacements, handle, profile_id, None, ctypes.byref(count))
    if not count.value:
        return []
    array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    call(pynvml.nvmlDeviceGetGpuInstancePossiblePlacements, handle, profile_id, array, ctypes.byref(count))
    return [Placement(array[i].start, array[i].size) for i in range(count.value)]


def create_gpu_instance(handle: Handle, profile_id: int, placement: Placement) -> Handle:
    wanted = pynvml.c_nvmlGpuInstancePlacement_t()
    wanted.start, wanted.size = placement.start, placement.size
    return call(pynvml.nvmlDeviceCreateGpuInstanceWithPlacement, handle, profile_id, ctypes.byref(wanted))


# A GPU has 8 memory slices and a GPU instance takes at least one: no profile has more instances. The buffer for a
# caller that does not know the profile's instanceCount.
MAX_GPU_INSTANCES = 8


def gpu_instances(handle: Handle, profile_id: int, capacity: int = MAX_GPU_INSTANCES) -> list[Handle]:
    """The GPU instances of one profile, in one call with a buffer of `capacity` (the profile's instanceCount).

    nvml.h: the buffer "must be large enough to accommodate the instances supported by the profile"; NVML's own
    bindings (go-nvml) pass one of instanceCount entries and never ask for the count with a NULL buffer."""
    count = ctypes.c_uint(capacity)
    array = (pynvml.c_nvmlGpuInstance_t * max(1, capacity))()
    call(pynvml.nvmlDeviceGetGpuInstances, handle, profile_id, array, ctypes.byref(count))
    return [array[i] for i in range(count.value)]


def gpu_instance_by_id(handle: Handle, gi_id: int) -> Handle:
    return call(pynvml.nvmlDeviceGetGpuInstanceById, handle, gi_id)


@dataclass(frozen=True)
class GpuInstanceInfo:
    id: int
    profile_id: int
    placement: Placement


def gpu_instance_info(gi: Handle) -> GpuInstanceInfo:
    raw = call(pynvml.nvmlGpuInstanceGetInfo, gi)
    return GpuInstanceInfo(raw.id, raw.profileId, Placement(raw.placement.start, raw.placement.size))


def destroy_gpu_instance(gi: Handle) -> None:
    call(pynvml.nvmlGpuInstanceDestroy, gi)


@dataclass(frozen=True)
class ComputeInstanceProfileInfo:
    profile: int
    id: int
    slice_count: int
    multiprocessors: int
    instance_count: int  # how many compute instances of this profile the GPU instance can hold


def compute_instance_profile_info(gi: Handle, profile: int) -> ComputeInstanceProfileInfo:
    raw = call(pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, profile, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
    return ComputeInstanceProfileInfo(profile, raw.id, raw.sliceCount, raw.multiprocessorCount, raw.instanceCount)


def create_compute_instance(gi: Handle, profile_id: int) -> Handle:
    return call(pynvml.nvmlGpuInstanceCreateComputeInstance, gi, profile_id)


def compute_instances(gi: Handle, profile: ComputeInstanceProfileInfo) -> list[Handle]:
    """The compute instances of one profile in a GPU instance, in one call with a buffer of the profile's
    instanceCount (as `gpu_instances`)."""
    count = ctypes.c_uint(profile.instance_count)
    array = (pynvml.c_nvmlComputeInstance_t * max(1, profile.instance_count))()
    call(pynvml.nvmlGpuInstanceGetComputeInstances, gi, profile.id, array, ctypes.byref(count))
    return [array[i] for i in range(count.value)]


def compute_instance_id_of(ci: Handle) -> int:
    return int(call(pynvml.nvmlComputeInstanceGetInfo, ci).id)


def destroy_compute_instance(ci: Handle) -> None:
    call(pynvml.nvmlComputeInstanceDestroy, ci)


# ---- interconnect -------------------------------------------------------------


def nvlink_state(handle: Handle, link: int) -> bool:
    return call(pynvml.nvmlDeviceGetNvLinkState, handle, link) == pynvml.NVML_FEATURE_ENABLED


def nvlink_version(handle: Handle, link: int) -> int:
    return call(pynvml.nvmlDeviceGetNvLinkVersion, handle, link)


@dataclass(frozen=True)
class FabricInfo:
    cluster_uuid: str  # canonical 8-4-4-4-12 form
    clique_id: int
    state: int
    status: int


def fabric_info(handle: Handle) -> FabricInfo:
    raw = pynvml.c_nvmlGpuFabricInfo_v2_t()
    call(pynvml.nvmlDeviceGetGpuFabricInfoV, handle, ctypes.byref(raw))
    hexdigits = bytes(raw.clusterUuid).hex()
    cluster = f"{hexdigits[:8]}-{hexdigits[8:12]}-{hexdigits[12:16]}-{hexdigits[16:20]}-{hexdigits[20:]}"
    return FabricInfo(cluster, int(raw.cliqueId), int(raw.state), int(raw.status))


# ---- events ---------------------------------------------------------------------


def event_set_create() -> Handle:
    return call(pynvml.nvmlEventSetCreate)


def supported_event_types(handle: Handle) -> int:
    return call(pynvml.nvmlDeviceGetSupportedEventTypes, handle)


def register_events(handle: Handle, mask: int, event_set: Handle) -> None:
    call(pynvml.nvmlDeviceRegisterEvents, handle, mask, event_set)


@dataclass(frozen=True)
class Event:
    device_address: int | None  # identifies the GPU handle the event came from
    event_type: int
    data: int  # the XID for XID events
    gpu_instance_id: int
    compute_instance_id: int


def event_set_wait(event_set: Handle, timeout_ms: int) -> Event:
    raw = call(pynvml.nvmlEventSetWait, event_set, timeout_ms)
    return Event(handle_address(raw.device), int(raw.eventType), int(raw.eventData), int(raw.gpuInstanceId), int(raw.computeInstanceId))


def event_set_free(event_set: Handle) -> None:
    call(pynvml.nvmlEventSetFree, event_set)


def handle_address(handle: Handle) -> int | None:
    """A handle's identity (NVML hands out the same pointer for the same device)."""
    return ctypes.cast(handle, ctypes.c_void_p).value
