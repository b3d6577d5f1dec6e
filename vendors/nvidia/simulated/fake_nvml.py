"""A simulated libnvidia-ml, installed as `pynvml.nvmlLib`.

pynvml resolves every C function with getattr(nvmlLib, "<symbol>") and passes
ctypes arguments (out-parameters through byref), so an object with methods
named after the C symbols is a complete stand-in: the real pynvml code and
everything above it run unchanged. Methods return nvmlReturn_t codes.

Handles (nvmlDevice_t, nvmlGpuInstance_t, ...) are opaque pointers; the fake
hands out distinct fake addresses and maps them back to its objects. It keeps
state like the driver does: MIG mode, GPU and compute instances created and
destroyed, event sets; tests can make any call fail per GPU and inject XID
and GPU-lost events. Given a `SimulatedState` (dra_driver.simulation.state), MIG modes
and instances outlive the process like a real GPU's: every change is saved
under its lock, and a change another process saved is read before the next call.
A new boot voids the instances and makes a pending MIG mode current.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
import uuid as uuidlib
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pynvml
from pydantic import BaseModel, ConfigDict, Field

from dra_driver.common.errors import ProfileError
from dra_driver.simulation.load import SimulatedLoad
from dra_driver.simulation.state import SimulatedState, changing
from dra_driver_nvidia.profile import GpuInstanceProfile, GpuModel, GpuSpec, NvidiaSection

_PTR = ctypes.sizeof(ctypes.c_void_p)
NO_ID = 0xFFFFFFFF
# Compute slices of each NVML_COMPUTE_INSTANCE_PROFILE_* enum value (0x0..0x6).
_CI_PROFILE_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6}


class _Saved(BaseModel):
    """A part of the saved state (sim_state): strict, so a field of the wrong type is damage, not a crash."""

    model_config = ConfigDict(strict=True, populate_by_name=True)


class SavedCompute(_Saved):
    id: int
    profile_id: int = Field(alias="profileId")
    uuid: str


class SavedGpuInstance(_Saved):
    id: int
    profile_id: int = Field(alias="profileId")
    start: int
    computes: list[SavedCompute]


class SavedGpu(_Saved):
    mig_mode: int = Field(alias="migMode")
    mig_pending: int = Field(alias="migPending")
    compute_mode: int = Field(default=pynvml.NVML_COMPUTEMODE_DEFAULT, alias="computeMode")
    instances: list[SavedGpuInstance]


class SavedHardware(_Saved):
    """What `_export` writes: the MIG UUID serial and each GPU's modes and instances, by GPU UUID."""

    serial: int = 0
    gpus: dict[str, SavedGpu] = Field(default_factory=dict)


def error_code(name: str) -> int:
    """NVML error name ("GPU_IS_LOST" or "NVML_ERROR_GPU_IS_LOST") -> nvmlReturn_t value."""
    key = name if name.startswith("NVML_ERROR_") else f"NVML_ERROR_{name}"
    code = getattr(pynvml, key, None)
    if not isinstance(code, int):
        raise ValueError(f"unknown NVML error {name!r}; use a name such as GPU_IS_LOST or NOT_SUPPORTED")
    return code


def simulated_symbols() -> list[str]:
    """The C symbols the simulated library implements (the only valid `failures` keys)."""
    return sorted(name for name in vars(FakeNvmlLibrary) if name.startswith("nvml") and callable(getattr(FakeNvmlLibrary, name)))


def _failures(entries: dict[str, str], where: str) -> dict[str, int]:
    """Validate a `failures` map: a key the fake does not implement would silently do nothing."""
    known = set(simulated_symbols())
    result: dict[str, int] = {}
    for symbol, name in entries.items():
        if symbol not in known:
            close = [k for k in sorted(known) if k.lower().startswith(symbol.lower()) or symbol.lower().startswith(k.lower())]
            suggestion = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ProfileError(f"{where}.{symbol}: not a simulated NVML symbol{suggestion}; valid symbols: {', '.join(sorted(known))}")
        try:
            result[symbol] = error_code(name)
        except ValueError as exc:
            raise ProfileError(f"{where}.{symbol}: {exc}") from exc
    return result


def _gpu_part(gpu: FakeGpu) -> dict[str, Any]:
    """One GPU's part of the saved state (SavedGpu)."""
    return {
        "migMode": gpu.mig_mode, "migPending": gpu.mig_pending, "computeMode": gpu.compute_mode,
        "instances": [
            {"id": gi.id, "profileId": gi.profile.id, "start": gi.start,
             "computes": [{"id": ci.id, "profileId": ci.profile_id, "uuid": ci.uuid} for ci in gi.computes.values()]}
            for gi in gpu.instances.values()
        ],
    }  # fmt: skip


def _out(ref: Any) -> Any:
    """The object behind an out-parameter (byref(x) or a pointer)."""
    return ref._obj if hasattr(ref, "_obj") else ref.contents


def _int(value: Any) -> int:
    return int(value.value) if hasattr(value, "value") else int(value)


def _address(handle: Any) -> int | None:
    if isinstance(handle, (ctypes._Pointer, ctypes.c_void_p)):  # every handle pynvml passes: its value read in place,
        return ctypes.c_void_p.from_buffer(handle).value  # ~3x cheaper than cast (a foreign call) on every NVML call
    return ctypes.cast(handle, ctypes.c_void_p).value


def _store_handle(target: Any, address: int, offset: int = 0) -> None:
    ctypes.c_void_p.from_buffer(target, offset).value = address


@dataclass(eq=False)
class FakeGpu:
    index: int
    spec: GpuSpec
    model: GpuModel
    mig_mode: int = 0
    mig_pending: int = 0  # differs from mig_mode until reset_gpu() on boards that need a reset
    compute_mode: int = pynvml.NVML_COMPUTEMODE_DEFAULT
    lost: bool = False
    failures: dict[str, int] = field(default_factory=dict)
    instances: dict[int, FakeGpuInstance] = field(default_factory=dict)  # GI id -> GI
    ecc: dict[int, int] = field(default_factory=dict)  # nvmlMemoryErrorType_t -> aggregate count (inject_ecc)
    _address: int = field(default=0, init=False)  # the handle value NVML callers hold (set by _register)


@dataclass(eq=False)
class FakeGpuInstance:
    gpu: FakeGpu
    id: int
    profile: GpuInstanceProfile
    start: int
    computes: dict[int, FakeComputeInstance] = field(default_factory=dict)
    _address: int = field(default=0, init=False)  # the handle value NVML callers hold (set by _register)


@dataclass(eq=False)
class FakeComputeInstance:
    gi: FakeGpuInstance
    id: int
    profile_id: int
    slices: int
    uuid: str
    _address: int = field(default=0, init=False)  # the handle value NVML callers hold (set by _register)


@dataclass(eq=False)
class FakeEventSet:
    registered: dict[int, int] = field(default_factory=dict)  # GPU index -> event mask
    pending: deque[tuple[int, int, int, int, int]] = field(default_factory=deque)
    lost: bool = False


class FakeNvmlLibrary:
    """The simulated library. One instance per profile; see install()."""

    def __init__(self, section: NvidiaSection, state: SimulatedState | None = None) -> None:
        self.section = section
        self.state = state
        self._lock = threading.RLock()
        self._wakeup = threading.Condition(self._lock)
        self._objects: dict[int, Any] = {}
        self._next_address = 0x10000
        self.initialized = 0
        self.init_flags: list[int] = []
        self.failures = _failures(section.failures, "nvidia.failures")
        self.gpus: list[FakeGpu] = []
        self.event_sets: list[FakeEventSet] = []
        self.created: list[tuple[str, int]] = []  # (GPU uuid, GI id) in creation order
        self.destroyed: list[tuple[str, int]] = []
        self._serial = 0  # GPU instances ever created on this node: part of each new MIG UUID
        # Each GPU's part of the saved state as last exported, and the GPUs a change in progress looked up: a save
        # exports those anew and hands the others over as they were (SimulatedState appends only what differs).
        self._exported: dict[int, dict[str, Any]] = {}
        self._touched: set[int] | None = None
        self.load = SimulatedLoad(seed="nvidia")  # readings of the metric calls (keys: GPU and MIG UUIDs)
        for index, spec in enumerate(section.gpus):
            model = section.models[spec.model]
            gpu = FakeGpu(index, spec, model, mig_mode=int(spec.migEnabled), mig_pending=int(spec.migEnabled))
            gpu.failures = _failures(spec.failures, f"nvidia.gpus[{index}].failures")
            self.gpus.append(gpu)
            self._register(gpu)
            for mig in spec.migDevices:
                profile = self._profile_by_id(gpu, mig.profileId)
                if profile is None:
                    raise ValueError(f"GPU {index}: MIG profile ID {mig.profileId} is not in model {spec.model!r}")
                gi = self._new_gpu_instance(gpu, profile, mig.start)
                self._new_compute_instance(gi, self._full_ci_profile(profile), mig.uuid)
        if state is not None:
            with self._lock:
                self._read_state()

    # ---- persistent state ------------------------------------------------

    def _export(self) -> dict[str, Any]:
        """The state to save: the GPUs the change looked up exported anew, the others' parts as exported before (the
        same objects: never changed once made, so comparing them with what was saved costs nothing)."""
        touched = self._touched if self._touched is not None else set()
        gpus = {}
        for gpu in self.gpus:
            part = self._exported.get(gpu.index)
            if part is None or gpu.index in touched:
                part = self._exported[gpu.index] = _gpu_part(gpu)
            gpus[gpu.spec.uuid] = part
        return {"serial": self._serial, "gpus": gpus}

    def _read_state(self) -> None:
        """Take the saved state (what another process or an earlier daemon left), keeping the handles of what is unchanged."""
        assert self.state is not None
        self._exported.clear()  # whatever it changes is exported anew
        loaded = self.state.load(SavedHardware)
        if loaded is None:
            return
        saved = loaded.hardware
        self._serial = max(self._serial, saved.serial)
        for gpu in self.gpus:
            entry = saved.gpus.get(gpu.spec.uuid)
            if entry is None:
                continue
            gpu.mig_pending = entry.mig_pending
            gpu.mig_mode = gpu.mig_pending if loaded.boot_changed else entry.mig_mode
            # The compute mode outlives a driver restart, not a reboot (the driver loads with Default).
            gpu.compute_mode = pynvml.NVML_COMPUTEMODE_DEFAULT if loaded.boot_changed else entry.compute_mode
            self._take_instances(gpu, [] if loaded.boot_changed else entry.instances)

    def _take_instances(self, gpu: FakeGpu, saved: list[SavedGpuInstance]) -> None:
        wanted = {gi.id: gi for gi in saved}
        for gi_id, held in list(gpu.instances.items()):
            entry = wanted.get(gi_id)
            if entry is None or (entry.profile_id, entry.start) != (held.profile.id, held.start):
                self._forget_gpu_instance(held)
        for gi_id, entry in wanted.items():
            gi = gpu.instances.get(gi_id)
            if gi is None:
                profile = self._profile_by_id(gpu, entry.profile_id)
                if profile is None:
                    continue  # not in this profile's table: the digest check makes this unreachable
                gi = FakeGpuInstance(gpu, gi_id, profile, entry.start)
                gpu.instances[gi_id] = gi
                self._register(gi)
            computes = {ci.id: ci for ci in entry.computes if ci.profile_id in _CI_PROFILE_SLICES}
            for ci_id, ci in list(gi.computes.items()):
                if ci_id not in computes or computes[ci_id].uuid != ci.uuid:
                    del gi.computes[ci_id]
                    self._objects.pop(ci._address, None)
            for ci_id, ci_entry in computes.items():
                if ci_id not in gi.computes:
                    profile_id = ci_entry.profile_id
                    ci = FakeComputeInstance(gi, ci_id, profile_id, _CI_PROFILE_SLICES[profile_id], ci_entry.uuid)
                    gi.computes[ci_id] = ci
                    self._register(ci)

    def _forget_gpu_instance(self, gi: FakeGpuInstance) -> None:
        for ci in gi.computes.values():
            self._objects.pop(ci._address, None)
        self._objects.pop(gi._address, None)
        gi.gpu.instances.pop(gi.id, None)

    def _sync(self) -> None:
        """Read the state again if another process has saved a change since (a stat when it has not)."""
        if self.state is not None and self.state.changed():
            self._read_state()

    @contextmanager
    def _changing(self) -> Iterator[None]:
        """A call that may change the hardware: under the state's lock, on its latest version, saved after. Every GPU
        it looks a handle up on (a GPU's, or that of one of its instances: `_lookup`) is exported anew."""
        with self._lock:
            outer = self._touched is None
            if outer:
                self._touched = set()
            try:
                with changing(self.state, self._sync, self._export):
                    yield
            finally:
                if outer:
                    self._touched = None

    def close(self) -> None:
        if self.state is not None:
            self.state.close()

    # ---- test controls -------------------------------------------------

    def fail(self, symbol: str, error: str, gpu: int | None = None) -> None:
        """Make `symbol` return `error` (for one GPU, or for every call when gpu is None)."""
        with self._lock:
            target = self.gpus[gpu].failures if gpu is not None else self.failures
            target.update(_failures({symbol: error}, "fail()"))

    def inject_xid(self, gpu: int, xid: int, gi_id: int = NO_ID, ci_id: int = NO_ID) -> None:
        """Deliver an XID critical-error event to every event set watching this GPU."""
        with self._lock:
            for event_set in self.event_sets:
                if event_set.registered.get(gpu, 0) & pynvml.nvmlEventTypeXidCriticalError:
                    event_set.pending.append((gpu, pynvml.nvmlEventTypeXidCriticalError, xid, gi_id, ci_id))
            self._wakeup.notify_all()

    def inject_ecc(self, gpu: int, corrected: int = 0, uncorrected: int = 0) -> None:
        """Add ECC errors to a GPU's aggregate counters (nvmlDeviceGetTotalEccErrors)."""
        with self._lock:
            counts = self.gpus[gpu].ecc
            counts[pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED] = counts.get(pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, 0) + corrected
            counts[pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED] = counts.get(pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, 0) + uncorrected

    def inject_gpu_lost(self, gpu: int) -> None:
        """The GPU falls off the bus: every later call on it and the next event wait fail with GPU_IS_LOST."""
        with self._lock:
            self.gpus[gpu].lost = True
            for event_set in self.event_sets:
                if gpu in event_set.registered:
                    event_set.lost = True
            self._wakeup.notify_all()

    def reset_gpu(self, gpu: int) -> None:
        """A GPU reset (nvidia-smi -r): MIG instances are gone and a pending MIG mode takes effect."""
        with self._changing():
            target = self.gpus[gpu]
            self._touch(target)
            for gi in list(target.instances.values()):
                self._forget_gpu_instance(gi)
            target.mig_mode = target.mig_pending

    def live_instances(self) -> Iterator[tuple[str, int, int]]:
        """(GPU uuid, GI id, placement start) of every GPU instance that exists now."""
        with self._lock:
            self._sync()
            for gpu in self.gpus:
                for gi in gpu.instances.values():
                    yield gpu.spec.uuid, gi.id, gi.start

    # ---- object bookkeeping ---------------------------------------------

    def _register(self, obj: Any) -> int:
        address = self._next_address
        self._next_address += 0x10
        self._objects[address] = obj
        obj._address = address
        return address

    def _lookup(self, handle: Any, kind: type) -> Any:
        with self._lock:
            self._sync()
            obj = self._objects.get(_address(handle) or 0)
            if self._touched is not None and obj is not None:
                self._touch(obj)
        return obj if isinstance(obj, kind) else None

    def _touch(self, obj: Any) -> None:
        """A change in progress reached `obj`: its GPU's part of the state is exported anew."""
        assert self._touched is not None
        gpu: FakeGpu | None = None
        if isinstance(obj, FakeGpu):
            gpu = obj
        elif isinstance(obj, FakeGpuInstance):
            gpu = obj.gpu
        elif isinstance(obj, FakeComputeInstance):
            gpu = obj.gi.gpu
        if gpu is not None:
            self._touched.add(gpu.index)

    def _gpu_call(self, symbol: str, handle: Any) -> tuple[int, FakeGpu | None]:
        """Common checks of a per-device call: init, handle, injected failures, lost GPU."""
        if not self.initialized:
            return pynvml.NVML_ERROR_UNINITIALIZED, None
        if symbol in self.failures:
            return self.failures[symbol], None
        gpu = self._lookup(handle, FakeGpu)  # reads what another process saved since
        if gpu is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT, None
        if gpu.lost:
            return pynvml.NVML_ERROR_GPU_IS_LOST, None
        if symbol in gpu.failures:
            return gpu.failures[symbol], None
        return pynvml.NVML_SUCCESS, gpu

    def _system_call(self, symbol: str) -> int:
        if not self.initialized:
            return pynvml.NVML_ERROR_UNINITIALIZED
        return self.failures.get(symbol, pynvml.NVML_SUCCESS)

    @staticmethod
    def _profile_by_enum(gpu: FakeGpu, profile: int) -> GpuInstanceProfile | None:
        if gpu.model.mig is None:
            return None
        return next((p for p in gpu.model.mig.gpuInstanceProfiles if p.profile == profile), None)

    @staticmethod
    def _profile_by_id(gpu: FakeGpu, profile_id: int) -> GpuInstanceProfile | None:
        if gpu.model.mig is None:
            return None
        return next((p for p in gpu.model.mig.gpuInstanceProfiles if p.id == profile_id), None)

    @staticmethod
    def _full_ci_profile(profile: GpuInstanceProfile) -> int:
        return next(enum for enum, slices in _CI_PROFILE_SLICES.items() if slices == profile.sliceCount)

    def _new_gpu_instance(self, gpu: FakeGpu, profile: GpuInstanceProfile, start: int) -> FakeGpuInstance:
        # GI IDs as seen on real boards for 1- and 2-slice profiles; lowest free otherwise.
        preferred = {1: 7 + start, 2: 3 + start // 2}.get(profile.placements.size)
        gi_id = preferred if preferred is not None and preferred not in gpu.instances else next(i for i in range(1, 15) if i not in gpu.instances)
        gi = FakeGpuInstance(gpu, gi_id, profile, start)
        gpu.instances[gi_id] = gi
        self._register(gi)
        self.created.append((gpu.spec.uuid, gi_id))
        self._serial += 1
        return gi

    def _new_compute_instance(self, gi: FakeGpuInstance, ci_profile: int, mig_uuid: str | None = None) -> FakeComputeInstance:
        ci_id = next(i for i in range(8) if i not in gi.computes)
        if mig_uuid is None:
            digest = hashlib.sha256(f"{gi.gpu.spec.uuid}/{gi.id}/{ci_id}/{self._serial}".encode()).digest()
            mig_uuid = f"MIG-{uuidlib.UUID(bytes=digest[:16])}"
        ci = FakeComputeInstance(gi, ci_id, ci_profile, _CI_PROFILE_SLICES[ci_profile], mig_uuid)
        gi.computes[ci_id] = ci
        self._register(ci)
        return ci

    def _mig_devices(self, gpu: FakeGpu) -> list[FakeComputeInstance]:
        return [ci for gi in sorted(gpu.instances.values(), key=lambda g: g.id) for ci in sorted(gi.computes.values(), key=lambda c: c.id)]

    def _occupied(self, gpu: FakeGpu) -> set[int]:
        return {s for gi in gpu.instances.values() for s in range(gi.start, gi.start + gi.profile.placements.size)}

    # ---- library and system -----------------------------------------------

    def nvmlInitWithFlags(self, flags: Any) -> int:
        if "nvmlInitWithFlags" in self.failures:
            return self.failures["nvmlInitWithFlags"]
        with self._lock:
            self.initialized += 1
            self.init_flags.append(_int(flags))
        return pynvml.NVML_SUCCESS

    def nvmlShutdown(self) -> int:
        with self._lock:
            if not self.initialized:
                return pynvml.NVML_ERROR_UNINITIALIZED
            self.initialized -= 1
        return pynvml.NVML_SUCCESS

    def nvmlSystemGetDriverVersion(self, buffer: Any, size: Any) -> int:
        ret = self._system_call("nvmlSystemGetDriverVersion")
        if ret == pynvml.NVML_SUCCESS:
            buffer.value = self.section.driverVersion.encode()
        return ret

    def nvmlSystemGetCudaDriverVersion(self, ref: Any) -> int:
        ret = self._system_call("nvmlSystemGetCudaDriverVersion")
        if ret == pynvml.NVML_SUCCESS:
            _out(ref).value = self.section.cudaDriverVersion
        return ret

    def nvmlSystemGetCudaDriverVersion_v2(self, ref: Any) -> int:
        return self.nvmlSystemGetCudaDriverVersion(ref)

    def nvmlDeviceGetCount_v2(self, ref: Any) -> int:
        ret = self._system_call("nvmlDeviceGetCount_v2")
        if ret == pynvml.NVML_SUCCESS:
            _out(ref).value = len(self.gpus)
        return ret

    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, ref: Any) -> int:
        ret = self._system_call("nvmlDeviceGetHandleByIndex_v2")
        if ret != pynvml.NVML_SUCCESS:
            return ret
        position = _int(index)
        if not 0 <= position < len(self.gpus):
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        gpu = self.gpus[position]
        if "nvmlDeviceGetHandleByIndex_v2" in gpu.failures:
            return gpu.failures["nvmlDeviceGetHandleByIndex_v2"]
        _store_handle(_out(ref), gpu._address)
        return pynvml.NVML_SUCCESS

    # ---- device identity ------------------------------------------------------

    def _string_call(self, symbol: str, handle: Any, buffer: Any, value: Any) -> int:
        with self._lock:
            mig = self._lookup(handle, FakeComputeInstance)
            if mig is not None and symbol == "nvmlDeviceGetUUID":
                buffer.value = mig.uuid.encode()
                return pynvml.NVML_SUCCESS
            ret, gpu = self._gpu_call(symbol, handle)
            if gpu is not None:
                buffer.value = value(gpu).encode()
            return ret

    def nvmlDeviceGetName(self, handle: Any, buffer: Any, size: Any) -> int:
        return self._string_call("nvmlDeviceGetName", handle, buffer, lambda g: g.model.name)

    def nvmlDeviceGetUUID(self, handle: Any, buffer: Any, size: Any) -> int:
        return self._string_call("nvmlDeviceGetUUID", handle, buffer, lambda g: g.spec.uuid)

    def _uint_call(self, symbol: str, handle: Any, ref: Any, value: Any) -> int:
        with self._lock:
            ret, gpu = self._gpu_call(symbol, handle)
            if gpu is not None:
                result = value(gpu)
                if isinstance(result, int) and result < 0:
                    return -result  # a negative value encodes an NVML error
                _out(ref).value = result
            return ret

    def nvmlDeviceGetMinorNumber(self, handle: Any, ref: Any) -> int:
        return self._uint_call("nvmlDeviceGetMinorNumber", handle, ref, lambda g: g.spec.minor)

    def nvmlDeviceGetIndex(self, handle: Any, ref: Any) -> int:
        return self._uint_call("nvmlDeviceGetIndex", handle, ref, lambda g: g.index)

    def nvmlDeviceGetBrand(self, handle: Any, ref: Any) -> int:
        return self._uint_call("nvmlDeviceGetBrand", handle, ref, lambda g: g.model.brand)

    def nvmlDeviceGetArchitecture(self, handle: Any, ref: Any) -> int:
        return self._uint_call("nvmlDeviceGetArchitecture", handle, ref, lambda g: g.model.architecture)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any, ref: Any) -> int:
        return self._uint_call(
            "nvmlDeviceGetMaxMigDeviceCount", handle, ref,
            lambda g: g.model.mig.maxDevices if g.model.mig else -pynvml.NVML_ERROR_NOT_SUPPORTED,
        )

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any, major: Any, minor: Any) -> int:
        with self._lock:
            ret, gpu = self._gpu_call("nvmlDeviceGetCudaComputeCapability", handle)
            if gpu is not None:
                _out(major).value, _out(minor).value = gpu.model.cudaComputeCapability
            return ret

    def nvmlDeviceGetPciInfo_v3(self, handle: Any, ref: Any) -> int:
        with self._lock:
            ret, gpu = self._gpu_call("nvmlDeviceGetPciInfo_v3", handle)
            if gpu is not None:
                info = _out(ref)
                domain, bus, rest = gpu.spec.pciBusId.split(":")
                info.busId = gpu.spec.pciBusId.encode()
                info.busIdLegacy = f"{int(domain, 16):04X}:{bus}:{rest}".encode()
                info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
                info.pciDeviceId = gpu.model.pciDeviceId
                info.pciSubSystemId = gpu.model.pciSubSystemId
            return ret

    def nvmlDeviceGetMemoryInfo(self, handle: Any, ref: Any) -> int:
        with self._lock:
            mig = self._lookup(handle, FakeComputeInstance)
            # A MIG device moves on its own (the utilization call, which moves a GPU, is not supported on it).
            if mig is not None:
                total = mig.gi.profile.memoryMB << 20
                fraction = self.load.advance(mig.uuid).memory_fraction
            else:
                ret, gpu = self._gpu_call("nvmlDeviceGetMemoryInfo", handle)
                if gpu is None:
                    return ret
                total = gpu.model.memoryMiB << 20
                fraction = self.load.current(gpu.spec.uuid).memory_fraction
            used = min(total, int(total * fraction)) & ~0xFFFFF  # whole MiB, as the driver reports
            info = _out(ref)
            info.total, info.used, info.free = total, used, total - used
            return pynvml.NVML_SUCCESS

    # ---- metric calls (readings from self.load: drifting, higher on devices a claim holds) ----

    def _reading_call(self, symbol: str, handle: Any, store: Any) -> int:
        with self._lock:
            if self._lookup(handle, FakeComputeInstance) is not None:
                return pynvml.NVML_ERROR_NOT_SUPPORTED  # as on a real MIG device: measured on the parent only
            ret, gpu = self._gpu_call(symbol, handle)
            if gpu is not None:
                store(gpu)
            return ret

    def nvmlDeviceGetUtilizationRates(self, handle: Any, ref: Any) -> int:
        def store(gpu: FakeGpu) -> None:
            reading = self.load.advance(gpu.spec.uuid)
            _out(ref).gpu = round(reading.utilization * 100)
            _out(ref).memory = round(reading.utilization * 60)

        return self._reading_call("nvmlDeviceGetUtilizationRates", handle, store)

    def nvmlDeviceGetPowerUsage(self, handle: Any, ref: Any) -> int:
        def store(gpu: FakeGpu) -> None:
            _out(ref).value = round(self.load.current(gpu.spec.uuid).power_fraction * gpu.model.powerLimitW * 1000)

        return self._reading_call("nvmlDeviceGetPowerUsage", handle, store)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any, ref: Any) -> int:
        return self._uint_call("nvmlDeviceGetEnforcedPowerLimit", handle, ref, lambda g: g.model.powerLimitW * 1000)

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: Any, ref: Any) -> int:
        def store(gpu: FakeGpu) -> None:
            _out(ref).value = round(self.load.current(gpu.spec.uuid).temperature_celsius)

        if _int(sensor) != pynvml.NVML_TEMPERATURE_GPU:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        return self._reading_call("nvmlDeviceGetTemperature", handle, store)

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: Any, counter_type: Any, ref: Any) -> int:
        def store(gpu: FakeGpu) -> None:
            _out(ref).value = gpu.ecc.get(_int(error_type), 0)

        return self._reading_call("nvmlDeviceGetTotalEccErrors", handle, store)

    def nvmlDeviceGetAttributes_v2(self, handle: Any, ref: Any) -> int:
        with self._lock:
            attrs = _out(ref)
            mig = self._lookup(handle, FakeComputeInstance)
            if mig is not None:
                profile = mig.gi.profile
                attrs.multiprocessorCount = profile.multiprocessors * mig.slices // profile.sliceCount
                attrs.sharedCopyEngineCount = profile.copyEngines
                attrs.sharedDecoderCount = profile.decoders
                attrs.sharedEncoderCount = profile.encoders
                attrs.sharedJpegCount = profile.jpegEngines
                attrs.sharedOfaCount = profile.ofaEngines
                attrs.gpuInstanceSliceCount = profile.sliceCount
                attrs.computeInstanceSliceCount = mig.slices
                attrs.memorySizeMB = profile.memoryMB
                return pynvml.NVML_SUCCESS
            ret, gpu = self._gpu_call("nvmlDeviceGetAttributes_v2", handle)
            if gpu is None:
                return ret
            # Real NVML answers this call only for MIG device handles (NVML API reference, nvmlDeviceGetAttributes).
            return pynvml.NVML_ERROR_NOT_SUPPORTED

    # ---- compute mode ------------------------------------------------------------

    def nvmlDeviceGetComputeMode(self, handle: Any, ref: Any) -> int:
        with self._lock:
            ret, gpu = self._gpu_call("nvmlDeviceGetComputeMode", handle)
            if gpu is None:
                return ret
            _out(ref).value = gpu.compute_mode
            return pynvml.NVML_SUCCESS

    def nvmlDeviceSetComputeMode(self, handle: Any, mode: Any) -> int:
        with self._changing():
            ret, gpu = self._gpu_call("nvmlDeviceSetComputeMode", handle)
            if gpu is None:
                return ret
            value = _int(mode)
            if value not in (pynvml.NVML_COMPUTEMODE_DEFAULT, pynvml.NVML_COMPUTEMODE_EXCLUSIVE_THREAD,
                             pynvml.NVML_COMPUTEMODE_PROHIBITED, pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS):
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            gpu.compute_mode = value
            return pynvml.NVML_SUCCESS

    # ---- MIG mode and MIG devices ---------------------------------------------

    def nvmlDeviceGetMigMode(self, handle: Any, current: Any, pending: Any) -> int:
        with self._lock:
            ret, gpu = self._gpu_call("nvmlDeviceGetMigMode", handle)
            if gpu is None:
                return ret
            if gpu.model.mig is None:
                return pynvml.NVML_ERROR_NOT_SUPPORTED
            _out(current).value, _out(pending).value = gpu.mig_mode, gpu.mig_pending
            return pynvml.NVML_SUCCESS

    def nvmlDeviceSetMigMode(self, handle: Any, mode: Any, activation: Any) -> int:
        with self._changing():
            ret, gpu = self._gpu_call("nvmlDeviceSetMigMode", handle)
            if gpu is None:
                return ret
            if gpu.model.mig is None:
                return pynvml.NVML_ERROR_NOT_SUPPORTED
            if not _int(mode) and gpu.instances:
                return pynvml.NVML_ERROR_IN_USE
            gpu.mig_pending = _int(mode)
            if gpu.model.migModeNeedsReset and gpu.mig_pending != gpu.mig_mode:
                # The call succeeds, but only the pending mode changes until the GPU is reset.
                _out(activation).value = pynvml.NVML_ERROR_RESET_REQUIRED
                return pynvml.NVML_SUCCESS
            gpu.mig_mode = gpu.mig_pending
            _out(activation).value = pynvml.NVML_SUCCESS
            return pynvml.NVML_SUCCESS

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: Any, ref: Any) -> int:
        with self._lock:
            ret, gpu = self._gpu_call("nvmlDeviceGetMigDeviceHandleByIndex", handle)
            if gpu is None:
                return ret
            if not gpu.mig_mode:
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            devices = self._mig_devices(gpu)
            position = _int(index)
            if position >= len(devices):
                return pynvml.NVML_ERROR_NOT_FOUND
            _store_handle(_out(ref), devices[position]._address)
            return pynvml.NVML_SUCCESS

    def nvmlDeviceGetGpuInstanceId(self, handle: Any, ref: Any) -> int:
        mig = self._lookup(handle, FakeComputeInstance)
        if mig is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        _out(ref).value = mig.gi.id
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetComputeInstanceId(self, handle: Any, ref: Any) -> int:
        mig = self._lookup(handle, FakeComputeInstance)
        if mig is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        _out(ref).value = mig.id
        return pynvml.NVML_SUCCESS

    # ---- GPU instances --------------------------------------------------------

    def nvmlDeviceGetGpuInstanceProfileInfoV(self, handle: Any, profile: Any, ref: Any) -> int:
        with self._lock:
            ret, gpu = self._gpu_call("nvmlDeviceGetGpuInstanceProfileInfoV", handle)
            if gpu is None:
                return ret
            row = self._profile_by_enum(gpu, _int(profile))
            if row is None:
                return pynvml.NVML_ERROR_NOT_SUPPORTED
            info = _out(ref)
            info.id, info.isP2pSupported, info.sliceCount = row.id, int(row.p2p), row.sliceCount
            info.instanceCount, info.multiprocessorCount = row.instanceCount, row.multiprocessors
            info.copyEngineCount, info.decoderCount, info.encoderCount = row.copyEngines, row.decoders, row.encoders
            info.jpegCount, info.ofaCount, info.memorySizeMB = row.jpegEngines, row.ofaEngines, row.memoryMB
            info.name = row.name.encode()
            return pynvml.NVML_SUCCESS

    def nvmlDeviceGetGpuInstancePossiblePlacements_v2(self, handle: Any, profile_id: Any, placements: Any, count: Any) -> int:
        with self._lock:
            ret, gpu = self._gpu_call("nvmlDeviceGetGpuInstancePossiblePlacements_v2", handle)
            if gpu is None:
                return ret
            row = self._profile_by_id(gpu, _int(profile_id))
            if row is None:
                return pynvml.NVML_ERROR_NOT_SUPPORTED
            starts = row.placements.starts
            counter = _out(count)
            if placements is None:  # size query
                counter.value = len(starts)
                return pynvml.NVML_SUCCESS
            if counter.value < len(starts):
                counter.value = len(starts)
                return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
            for position, start in enumerate(starts):
                placements[position].start, placements[position].size = start, row.placements.size
            counter.value = len(starts)
            return pynvml.NVML_SUCCESS

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, handle: Any, profile_id: Any, placement: Any, ref: Any) -> int:
        with self._changing():
            ret, gpu = self._gpu_call("nvmlDeviceCreateGpuInstanceWithPlacement", handle)
            if gpu is None:
                return ret
            if not gpu.mig_mode:
                return pynvml.NVML_ERROR_NOT_SUPPORTED  # nvml.h: "device doesn't have MIG mode enabled"
            row = self._profile_by_id(gpu, _int(profile_id))
            if row is None:
                return pynvml.NVML_ERROR_NOT_SUPPORTED
            wanted = _out(placement)
            if wanted.start not in row.placements.starts or wanted.size != row.placements.size:
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            if set(range(wanted.start, wanted.start + wanted.size)) & self._occupied(gpu):
                return pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
            gi = self._new_gpu_instance(gpu, row, wanted.start)
            _store_handle(_out(ref), gi._address)
            return pynvml.NVML_SUCCESS

    def nvmlDeviceGetGpuInstances(self, handle: Any, profile_id: Any, instances: Any, count: Any) -> int:
        with self._lock:
            ret, gpu = self._gpu_call("nvmlDeviceGetGpuInstances", handle)
            if gpu is None:
                return ret
            if instances is None:  # nvml.h: a buffer for the profile's instanceCount, not a count query
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            found = [gi for gi in sorted(gpu.instances.values(), key=lambda g: g.id) if gi.profile.id == _int(profile_id)]
            counter = _out(count)
            if counter.value < len(found):
                counter.value = len(found)
                return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
            for position, gi in enumerate(found):
                _store_handle(instances, gi._address, position * _PTR)
            counter.value = len(found)
            return pynvml.NVML_SUCCESS

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: Any, ref: Any) -> int:
        with self._lock:
            ret, gpu = self._gpu_call("nvmlDeviceGetGpuInstanceById", handle)
            if gpu is None:
                return ret
            gi = gpu.instances.get(_int(gi_id))
            if gi is None:
                return pynvml.NVML_ERROR_NOT_FOUND
            _store_handle(_out(ref), gi._address)
            return pynvml.NVML_SUCCESS

    def nvmlGpuInstanceGetInfo(self, handle: Any, ref: Any) -> int:
        gi = self._lookup(handle, FakeGpuInstance)
        if gi is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        info = _out(ref)
        info.device = ctypes.cast(ctypes.c_void_p(gi.gpu._address), pynvml.c_nvmlDevice_t)
        info.id, info.profileId = gi.id, gi.profile.id
        info.placement.start, info.placement.size = gi.start, gi.profile.placements.size
        return pynvml.NVML_SUCCESS

    def nvmlGpuInstanceDestroy(self, handle: Any) -> int:
        with self._changing():
            gi = self._lookup(handle, FakeGpuInstance)
            if gi is None or gi.gpu.instances.get(gi.id) is not gi:
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            if gi.gpu.lost:
                return pynvml.NVML_ERROR_GPU_IS_LOST
            if gi.computes:
                return pynvml.NVML_ERROR_IN_USE
            del gi.gpu.instances[gi.id]
            self._objects.pop(gi._address, None)
            self.destroyed.append((gi.gpu.spec.uuid, gi.id))
            return pynvml.NVML_SUCCESS

    # ---- compute instances ----------------------------------------------------

    def nvmlGpuInstanceGetComputeInstanceProfileInfoV(self, handle: Any, profile: Any, engine: Any, ref: Any) -> int:
        gi = self._lookup(handle, FakeGpuInstance)
        if gi is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        slices = _CI_PROFILE_SLICES.get(_int(profile))
        # Simulation: a GI offers the compute profiles that fit in it, 3c only in 3g and 7g GIs.
        if slices is None or slices > gi.profile.sliceCount or (slices == 3 and gi.profile.sliceCount == 4):
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        info = _out(ref)
        info.id, info.sliceCount = _int(profile), slices
        info.instanceCount = gi.profile.sliceCount // slices
        info.multiprocessorCount = gi.profile.multiprocessors * slices // gi.profile.sliceCount
        info.sharedCopyEngineCount, info.sharedDecoderCount = gi.profile.copyEngines, gi.profile.decoders
        info.sharedEncoderCount, info.sharedJpegCount = gi.profile.encoders, gi.profile.jpegEngines
        info.sharedOfaCount = gi.profile.ofaEngines
        name = gi.profile.name.removeprefix("MIG ")
        info.name = (f"MIG {name}" if slices == gi.profile.sliceCount else f"MIG {slices}c.{name}").encode()
        return pynvml.NVML_SUCCESS

    def nvmlGpuInstanceCreateComputeInstance(self, handle: Any, profile_id: Any, ref: Any) -> int:
        with self._changing():
            gi = self._lookup(handle, FakeGpuInstance)
            if gi is None:
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            slices = _CI_PROFILE_SLICES.get(_int(profile_id))
            used = sum(ci.slices for ci in gi.computes.values())
            if slices is None or slices > gi.profile.sliceCount:
                return pynvml.NVML_ERROR_NOT_SUPPORTED
            if used + slices > gi.profile.sliceCount:
                return pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
            ci = self._new_compute_instance(gi, _int(profile_id))
            _store_handle(_out(ref), ci._address)
            return pynvml.NVML_SUCCESS

    def nvmlGpuInstanceGetComputeInstances(self, handle: Any, profile_id: Any, instances: Any, count: Any) -> int:
        with self._lock:
            gi = self._lookup(handle, FakeGpuInstance)
            if gi is None:
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            if instances is None:  # as nvmlDeviceGetGpuInstances: a buffer for the profile's instanceCount
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            found = [ci for ci in sorted(gi.computes.values(), key=lambda c: c.id) if ci.profile_id == _int(profile_id)]
            counter = _out(count)
            if counter.value < len(found):
                counter.value = len(found)
                return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
            for position, ci in enumerate(found):
                _store_handle(instances, ci._address, position * _PTR)
            counter.value = len(found)
            return pynvml.NVML_SUCCESS

    def nvmlGpuInstanceGetComputeInstanceById(self, handle: Any, ci_id: Any, ref: Any) -> int:
        with self._lock:
            gi = self._lookup(handle, FakeGpuInstance)
            if gi is None:
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            ci = gi.computes.get(_int(ci_id))
            if ci is None:
                return pynvml.NVML_ERROR_NOT_FOUND
            _store_handle(_out(ref), ci._address)
            return pynvml.NVML_SUCCESS

    def nvmlComputeInstanceGetInfo_v2(self, handle: Any, ref: Any) -> int:
        ci = self._lookup(handle, FakeComputeInstance)
        if ci is None:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        info = _out(ref)
        info.device = ctypes.cast(ctypes.c_void_p(ci.gi.gpu._address), pynvml.c_nvmlDevice_t)
        info.gpuInstance = ctypes.cast(ctypes.c_void_p(ci.gi._address), pynvml.c_nvmlGpuInstance_t)
        info.id, info.profileId = ci.id, ci.profile_id
        return pynvml.NVML_SUCCESS

    def nvmlComputeInstanceDestroy(self, handle: Any) -> int:
        with self._changing():
            ci = self._lookup(handle, FakeComputeInstance)
            if ci is None or ci.gi.computes.get(ci.id) is not ci:
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            if ci.gi.gpu.lost:
                return pynvml.NVML_ERROR_GPU_IS_LOST
            del ci.gi.computes[ci.id]
            self._objects.pop(ci._address, None)
            return pynvml.NVML_SUCCESS

    # ---- interconnect -----------------------------------------------------------

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: Any, ref: Any) -> int:
        with self._lock:
            ret, gpu = self._gpu_call("nvmlDeviceGetNvLinkState", handle)
            if gpu is None:
                return ret
            if gpu.model.nvlink is None or _int(link) >= gpu.model.nvlink.links:
                return pynvml.NVML_ERROR_NOT_SUPPORTED if gpu.model.nvlink is None else pynvml.NVML_ERROR_INVALID_ARGUMENT
            _out(ref).value = pynvml.NVML_FEATURE_ENABLED
            return pynvml.NVML_SUCCESS

    def nvmlDeviceGetNvLinkVersion(self, handle: Any, link: Any, ref: Any) -> int:
        with self._lock:
            ret, gpu = self._gpu_call("nvmlDeviceGetNvLinkVersion", handle)
            if gpu is None:
                return ret
            if gpu.model.nvlink is None or _int(link) >= gpu.model.nvlink.links:
                return pynvml.NVML_ERROR_NOT_SUPPORTED if gpu.model.nvlink is None else pynvml.NVML_ERROR_INVALID_ARGUMENT
            _out(ref).value = gpu.model.nvlink.version
            return pynvml.NVML_SUCCESS

    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, ref: Any) -> int:
        with self._lock:
            ret, gpu = self._gpu_call("nvmlDeviceGetGpuFabricInfoV", handle)
            if gpu is None:
                return ret
            fabric = gpu.spec.fabric
            if fabric is None:
                return pynvml.NVML_ERROR_NOT_SUPPORTED
            info = _out(ref)
            raw = bytes.fromhex(fabric.clusterUuid.replace("-", ""))
            for position, byte in enumerate(raw[:16]):
                info.clusterUuid[position] = byte
            info.cliqueId, info.state, info.status = fabric.cliqueId, fabric.state, fabric.status
            return pynvml.NVML_SUCCESS

    # ---- events -----------------------------------------------------------------

    def nvmlEventSetCreate(self, ref: Any) -> int:
        with self._lock:
            ret = self._system_call("nvmlEventSetCreate")
            if ret != pynvml.NVML_SUCCESS:
                return ret
            event_set = FakeEventSet()
            self.event_sets.append(event_set)
            _store_handle(_out(ref), self._register(event_set))
            return pynvml.NVML_SUCCESS

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any, ref: Any) -> int:
        supported = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError
        return self._uint_call("nvmlDeviceGetSupportedEventTypes", handle, ref, lambda g: supported)

    def nvmlDeviceRegisterEvents(self, handle: Any, mask: Any, event_set_handle: Any) -> int:
        with self._lock:
            ret, gpu = self._gpu_call("nvmlDeviceRegisterEvents", handle)
            event_set = self._lookup(event_set_handle, FakeEventSet)
            if gpu is None:
                return ret
            if event_set is None:
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            event_set.registered[gpu.index] = event_set.registered.get(gpu.index, 0) | _int(mask)
            return pynvml.NVML_SUCCESS

    def nvmlEventSetWait_v2(self, event_set_handle: Any, ref: Any, timeout_ms: Any) -> int:
        with self._lock:
            event_set = self._lookup(event_set_handle, FakeEventSet)
            if event_set is None:
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            if not (event_set.pending or event_set.lost):
                self._wakeup.wait(_int(timeout_ms) / 1000.0)
            if event_set.lost:
                event_set.lost = False
                return pynvml.NVML_ERROR_GPU_IS_LOST
            if not event_set.pending:
                return pynvml.NVML_ERROR_TIMEOUT
            gpu_index, event_type, data, gi_id, ci_id = event_set.pending.popleft()
            event = _out(ref)
            event.device = ctypes.cast(ctypes.c_void_p(self.gpus[gpu_index]._address), pynvml.c_nvmlDevice_t)
            event.eventType, event.eventData = event_type, data
            event.gpuInstanceId, event.computeInstanceId = gi_id, ci_id
            return pynvml.NVML_SUCCESS

    def nvmlEventSetFree(self, event_set_handle: Any) -> int:
        with self._lock:
            event_set = self._lookup(event_set_handle, FakeEventSet)
            if event_set is None:
                return pynvml.NVML_ERROR_INVALID_ARGUMENT
            self.event_sets.remove(event_set)
            self._objects.pop(_address(event_set_handle) or 0, None)
            return pynvml.NVML_SUCCESS


def install(library: Any) -> None:
    """Make pynvml use `library` (a fake, or None to load the real libnvidia-ml next time)."""
    with pynvml.libLoadLock:
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml.nvmlLib = library
        pynvml._nvmlLib_refcount = 0


def installed() -> Any:
    return pynvml.nvmlLib
