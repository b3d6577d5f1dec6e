"""A simulated `amdsmi` module: the functions dra_driver_amd calls, fed by a hardware profile.

It stands in for the `amdsmi` Python package (7.0.2) and nothing else: the
functions have the same names, take the same arguments and return dicts with
the same keys and value formats as amdsmi_interface.py builds them (hex strings
for IDs, VRAM in MB, partition modes as "SPX"/"NPS1" strings, XGMI hive id as
an int). Errors are raised as AmdSmiLibraryException with the library's status
codes, so the production code above it takes the same paths as on a real node.

State that real hardware keeps (current partition modes, ECC counters, pending
reset events) lives here; tests drive it through the `inject_*` methods and read
`calls` to see which setters were used. Given a `SimulatedState`
(dra_driver.simulation.state), the partition modes outlive the process like a real GPU's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from dra_driver.simulation.load import SimulatedLoad
from dra_driver.simulation.state import SimulatedState, changing

from dra_driver_amd.profile import AmdProfile, GpuEntry, GpuModel

# amdsmi_wrapper status codes used here.
AMDSMI_STATUS_INVAL = 1
AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_NOT_FOUND = 31
AMDSMI_STATUS_UNKNOWN_ERROR = 0xFFFFFFFF


class AmdSmiException(Exception):
    """Base smi exception class (amdsmi_exception.py)."""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        super().__init__(abs(err_code))
        self.err_code = abs(err_code)

    def get_error_code(self) -> int:
        return self.err_code

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | simulated amdsmi status {self.err_code}"


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1 << 0
    INIT_AMD_GPUS = 1 << 1
    INIT_NON_AMD_CPUS = 1 << 2
    INIT_NON_AMD_GPUS = 1 << 3
    INIT_AMD_APUS = INIT_AMD_CPUS | INIT_AMD_GPUS


class AmdSmiComputePartitionType(IntEnum):
    INVALID = 0
    SPX = 1
    DPX = 2
    TPX = 3
    QPX = 4
    CPX = 5


class AmdSmiMemoryPartitionType(IntEnum):
    UNKNOWN = 0
    NPS1 = 1
    NPS2 = 2
    NPS4 = 4
    NPS8 = 8


class AmdSmiLinkType(IntEnum):
    AMDSMI_LINK_TYPE_INTERNAL = 0
    AMDSMI_LINK_TYPE_PCIE = 1
    AMDSMI_LINK_TYPE_XGMI = 2
    AMDSMI_LINK_TYPE_NOT_APPLICABLE = 3
    AMDSMI_LINK_TYPE_UNKNOWN = 4


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2
    HBM_0 = 3
    HBM_1 = 4
    HBM_2 = 5
    HBM_3 = 6
    PLX = 7


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1
    MIN = 2


class AmdSmiEvtNotificationType(IntEnum):
    NONE = 0
    VMFAULT = 1
    THERMAL_THROTTLE = 2
    GPU_PRE_RESET = 3
    GPU_POST_RESET = 4
    MIGRATE_START = 5
    MIGRATE_END = 6
    PAGE_FAULT_START = 7
    PAGE_FAULT_END = 8
    QUEUE_EVICTION = 9
    QUEUE_RESTORE = 10
    UNMAP_FROM_GPU = 11
    PROCESS_START = 12
    PROCESS_END = 13


@dataclass(frozen=True)
class FakeHandle:
    """A processor handle: one XCP (partition) of one physical GPU."""

    gpu_bdf: str
    partition: int


@dataclass
class _GpuState:
    entry: GpuEntry
    model: GpuModel
    compute: str | None
    memory: str | None
    correctable: int = 0
    uncorrectable: int = 0


class SavedModes(BaseModel):
    """One GPU's partition modes as saved (sim_state): strict, so a field of the wrong type is damage, not a crash."""

    model_config = ConfigDict(strict=True)

    compute: str | None = None
    memory: str | None = None


class SavedHardware(BaseModel):
    """What `_export` writes: each GPU's partition modes by BDF."""

    model_config = ConfigDict(strict=True)

    gpus: dict[str, SavedModes] = Field(default_factory=dict)


def _partition_bdf(bdf: str, index: int) -> str:
    # amd-smi lists partition k of 0000:0c:00.0 as 0000:0c:00.k.
    return f"{bdf[:-1]}{index}"


def _socket_key(gpu_bdf: str) -> str:
    """The load key of a GPU's socket-level readings (power, temperature), apart from its partition 0's."""
    return f"{gpu_bdf}/socket"


class FakeAmdSmi:
    """Module-like object: use it where the code expects the `amdsmi` module."""

    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    # Type aliases, so the methods' annotations below name the enums (amdsmi's attribute names).
    AmdSmiInitFlags: TypeAlias = AmdSmiInitFlags
    AmdSmiComputePartitionType: TypeAlias = AmdSmiComputePartitionType
    AmdSmiMemoryPartitionType: TypeAlias = AmdSmiMemoryPartitionType
    AmdSmiLinkType: TypeAlias = AmdSmiLinkType
    AmdSmiEvtNotificationType: TypeAlias = AmdSmiEvtNotificationType
    AmdSmiTemperatureType: TypeAlias = AmdSmiTemperatureType
    AmdSmiTemperatureMetric: TypeAlias = AmdSmiTemperatureMetric

    def __init__(self, profile: AmdProfile, state: SimulatedState | None = None) -> None:
        self.profile = profile
        self.state = state
        self.initialized = False
        self.calls: list[tuple[Any, ...]] = []  # setter calls, in order
        self._lock = threading.Condition()
        self._events: list[dict[str, Any]] = []
        # Readings of the metric calls, keyed by partition PCI address (partition 0's is the GPU's own).
        self.load = SimulatedLoad(seed="amd")
        self._failing: dict[str, set[str | None]] = {}  # call -> GPU BDFs it fails for (None: every GPU)
        self._gpus = {
            entry.bdf: _GpuState(entry, profile.models[entry.model], entry.compute_partition, entry.memory_partition)
            for entry in profile.gpus
        }
        self._read_state()
        outer = self

        class AmdSmiEventReader:
            """Reads the library-wide event queue (the C call takes no handle either)."""

            def __init__(self, processor_handle: FakeHandle, event_types: Iterable[AmdSmiEvtNotificationType]) -> None:
                outer._gpu(processor_handle)
                self.processor_handle = processor_handle
                self.event_types = {AmdSmiEvtNotificationType(t).name for t in event_types}

            def read(self, timestamp: int, num_elem: int = 10) -> list[dict[str, Any]]:
                return outer._read_events(self.event_types, timestamp, num_elem)

            def stop(self) -> None:
                return None

        self.AmdSmiEventReader = AmdSmiEventReader

    # -- persistent state ----------------------------------------------------

    def _read_state(self) -> None:
        """Take the partition modes saved by an earlier daemon or another process (a stat when nothing changed)."""
        if self.state is None or not self.state.changed():
            return
        loaded = self.state.load(SavedHardware)
        for bdf, modes in (loaded.hardware.gpus if loaded else {}).items():
            if bdf in self._gpus:
                self._gpus[bdf].compute, self._gpus[bdf].memory = modes.compute, modes.memory

    @contextmanager
    def _changing(self) -> Iterator[None]:
        """A setter: under the state's lock, on its latest version, saved after (in memory only without a state)."""
        with changing(self.state, self._read_state, self._export):
            yield

    def _export(self) -> dict[str, Any]:
        return {"gpus": {bdf: {"compute": gpu.compute, "memory": gpu.memory} for bdf, gpu in self._gpus.items()}}

    # -- helpers -------------------------------------------------------------

    def _check_init(self) -> None:
        if not self.initialized:
            raise AmdSmiLibraryException(32)  # AMDSMI_STATUS_NOT_INIT

    def _gpu(self, handle: Any) -> _GpuState:
        self._check_init()
        if not isinstance(handle, FakeHandle) or handle.gpu_bdf not in self._gpus:
            raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
        self._read_state()
        state = self._gpus[handle.gpu_bdf]
        if handle.partition >= self._num_partitions(state):
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_FOUND)  # stale handle after a mode change
        return state

    def _num_partitions(self, state: _GpuState) -> int:
        for profile in state.model.accelerator_profiles:
            if profile.type == state.compute:
                return profile.num_partitions
        return 1

    @staticmethod
    def _valid_pair(state: _GpuState, compute: str | None, memory: str | None) -> bool:
        """Whether the compute profile lists the memory mode in its memory_caps (AMD SMI partition docs)."""
        if compute is None or memory is None:
            return True
        return any(p.type == compute and memory in p.memory_caps for p in state.model.accelerator_profiles)

    def _partitioning_supported(self, state: _GpuState) -> None:
        if not state.model.accelerator_profiles or state.compute is None:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)

    # -- library lifetime and handles ---------------------------------------

    def amdsmi_init(self, flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        self.initialized = True

    def amdsmi_shut_down(self) -> None:
        self.initialized = False
        if self.state is not None:
            self.state.close()  # lets go of the state file it held open; the next call reads it again

    def amdsmi_get_processor_handles(self) -> list[FakeHandle]:
        self._check_init()
        self._read_state()
        return [
            FakeHandle(bdf, index) for bdf, state in self._gpus.items() for index in range(self._num_partitions(state))
        ]

    # -- identity ------------------------------------------------------------

    def amdsmi_get_gpu_device_bdf(self, handle: FakeHandle) -> str:
        self._gpu(handle)
        return _partition_bdf(handle.gpu_bdf, handle.partition)

    def amdsmi_get_gpu_device_uuid(self, handle: FakeHandle) -> str:
        state = self._gpu(handle)
        if state.entry.uuid and handle.partition == 0:
            return state.entry.uuid
        # amd-smi form "67ff74a1-0000-1000-8081-b5b9fd6edd00": device id in the first field.
        # From ROCm 7.0 every partition has its own UUID (real amd-smi listings).
        device = state.model.device_id[2:].lower().rjust(4, "0")
        return f"{handle.partition:02x}ff{device}-0000-1000-80{state.entry.xgmi_node_id:02x}-{state.entry.serial[-12:].lower()}"

    def amdsmi_get_gpu_asic_info(self, handle: FakeHandle) -> dict[str, Any]:
        state = self._gpu(handle)
        model = state.model
        return {
            "market_name": model.market_name,
            "vendor_id": model.vendor_id,
            "vendor_name": model.vendor_name.replace(",", ""),
            "subvendor_id": model.vendor_id,
            "device_id": model.device_id,
            "rev_id": model.rev_id,
            "asic_serial": state.entry.serial,
            "oam_id": state.entry.xgmi_node_id,
            "num_compute_units": model.num_compute_units // self._num_partitions(state),
            "target_graphics_version": model.target_graphics_version,
            "subsystem_id": "0x0c34",
        }

    def amdsmi_get_gpu_vram_info(self, handle: FakeHandle) -> dict[str, Any]:
        state = self._gpu(handle)
        return {
            "vram_type": 7,  # AMDSMI_VRAM_TYPE_HBM3 (an int in 7.0.2)
            "vram_vendor": "SAMSUNG",
            # The kernel gives each XCP an equal share of its memory partition.
            "vram_size": state.model.vram_size_mb // self._num_partitions(state),
            "vram_bit_width": 8192,
            "vram_max_bandwidth": 5300,
        }

    def amdsmi_get_gpu_driver_info(self, handle: FakeHandle) -> dict[str, Any]:
        self._gpu(handle)
        driver = self.profile.driver
        return {"driver_name": driver.name, "driver_version": driver.version, "driver_date": driver.date}

    def amdsmi_get_gpu_kfd_info(self, handle: FakeHandle) -> dict[str, Any]:
        self._gpu(handle)  # an unknown handle fails as amdsmi does
        position = list(self._gpus).index(handle.gpu_bdf)
        return {"kfd_id": 10000 + position, "node_id": 1 + position * 8 + handle.partition, "current_partition_id": handle.partition}

    def amdsmi_get_gpu_enumeration_info(self, handle: FakeHandle) -> dict[str, Any]:
        state = self._gpu(handle)
        offset = 0 if self.profile.partitions_report_primary_minors else handle.partition
        return {
            "drm_render": state.entry.render + offset,
            "drm_card": state.entry.card + offset,
            "hsa_id": 1 + handle.partition,
            "hip_id": handle.partition,
            "hip_uuid": f"GPU-{state.entry.serial[-16:].lower()}",
        }

    def amdsmi_topo_get_numa_node_number(self, handle: FakeHandle) -> int:
        return self._gpu(handle).entry.numa_node

    # -- partitions ----------------------------------------------------------

    def amdsmi_get_gpu_compute_partition(self, handle: FakeHandle) -> str:
        state = self._gpu(handle)
        self._partitioning_supported(state)
        return str(state.compute)

    def amdsmi_get_gpu_memory_partition(self, handle: FakeHandle) -> str:
        state = self._gpu(handle)
        if not state.model.memory_partition_caps or state.memory is None:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        return str(state.memory)

    def amdsmi_get_gpu_memory_partition_config(self, handle: FakeHandle) -> dict[str, Any]:
        state = self._gpu(handle)
        if not state.model.memory_partition_caps:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        return {
            "partition_caps": list(state.model.memory_partition_caps),
            "mp_mode": state.memory or "N/A",
            "num_numa_ranges": "N/A",
            "numa_range": "N/A",
        }

    def amdsmi_get_gpu_accelerator_partition_profile_config(self, handle: FakeHandle) -> dict[str, Any]:
        state = self._gpu(handle)
        self._partitioning_supported(state)
        profiles = [
            {
                "profile_type": profile.type,
                "num_partitions": profile.num_partitions,
                "profile_index": index,
                "memory_caps": list[str](profile.memory_caps) or ["N/A"],
                "num_resources": 1,
                "resources": [],
            }
            for index, profile in enumerate(state.model.accelerator_profiles)
        ]
        return {
            "num_profiles": len(profiles),
            "num_resource_profiles": 0,
            "resource_profiles": [],
            "default_profile_index": state.model.default_profile_index,
            "profiles": profiles,
        }

    def amdsmi_set_gpu_compute_partition(self, handle: FakeHandle, compute_partition: AmdSmiComputePartitionType) -> None:
        with self._changing():
            self._set_compute_partition(handle, compute_partition)

    def _set_compute_partition(self, handle: FakeHandle, compute_partition: AmdSmiComputePartitionType) -> None:
        state = self._gpu(handle)
        self._partitioning_supported(state)
        name = AmdSmiComputePartitionType(compute_partition).name
        if name not in {profile.type for profile in state.model.accelerator_profiles}:
            raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
        if not self._valid_pair(state, name, state.memory):
            raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)  # firmware refuses e.g. SPX with NPS4
        self.calls.append(("set_compute_partition", handle.gpu_bdf, name))
        state.compute = name

    def amdsmi_set_gpu_memory_partition(self, handle: FakeHandle, memory_partition: AmdSmiMemoryPartitionType) -> None:
        with self._changing():
            self._set_memory_partition(handle, memory_partition)

    def _set_memory_partition(self, handle: FakeHandle, memory_partition: AmdSmiMemoryPartitionType) -> None:
        state = self._gpu(handle)
        name = AmdSmiMemoryPartitionType(memory_partition).name
        if name not in state.model.memory_partition_caps or not self._valid_pair(state, state.compute, name):
            raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
        self.calls.append(("set_memory_partition", handle.gpu_bdf, name))
        if not self.profile.memory_reload_required:
            state.memory = name

    # -- XGMI ----------------------------------------------------------------

    def amdsmi_get_xgmi_info(self, handle: FakeHandle) -> dict[str, Any]:
        state = self._gpu(handle)
        if not state.entry.hive_id:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        return {"xgmi_lanes": 16, "xgmi_hive_id": state.entry.hive_id, "xgmi_node_id": state.entry.xgmi_node_id, "index": 0}

    def amdsmi_topo_get_link_type(self, src: FakeHandle, dst: FakeHandle) -> dict[str, int]:
        a, b = self._gpu(src), self._gpu(dst)
        if a is b:
            return {"hops": 0, "type": int(AmdSmiLinkType.AMDSMI_LINK_TYPE_INTERNAL)}
        if a.entry.hive_id and a.entry.hive_id == b.entry.hive_id:
            return {"hops": 1, "type": int(AmdSmiLinkType.AMDSMI_LINK_TYPE_XGMI)}
        return {"hops": 2, "type": int(AmdSmiLinkType.AMDSMI_LINK_TYPE_PCIE)}

    # -- health --------------------------------------------------------------

    def amdsmi_get_gpu_total_ecc_count(self, handle: FakeHandle) -> dict[str, int]:
        state, _ = self._reading("amdsmi_get_gpu_total_ecc_count", handle)
        return {"correctable_count": state.correctable, "uncorrectable_count": state.uncorrectable, "deferred_count": 0}

    # -- metrics (readings from self.load: drifting, higher on partitions a claim holds) --------------

    def _reading(self, call: str, handle: Any) -> tuple[_GpuState, str]:
        """The GPU behind a metric call and the load key of the handle's partition; fails as `fail` asked."""
        state = self._gpu(handle)
        failing = self._failing.get(call, set())
        if None in failing or handle.gpu_bdf in failing:
            raise AmdSmiLibraryException(AMDSMI_STATUS_UNKNOWN_ERROR)
        return state, _partition_bdf(handle.gpu_bdf, handle.partition)

    def amdsmi_get_gpu_activity(self, handle: FakeHandle) -> dict[str, Any]:
        _, key = self._reading("amdsmi_get_gpu_activity", handle)
        utilization = self.load.advance(key).utilization  # the call that moves a partition's readings
        if handle.partition == 0:
            self.load.advance(_socket_key(handle.gpu_bdf))  # and, on the primary, the socket's power and temperature
        return {"gfx_activity": round(utilization * 100), "umc_activity": round(utilization * 60), "mm_activity": "N/A"}

    def amdsmi_get_gpu_vram_usage(self, handle: FakeHandle) -> dict[str, int]:
        state, key = self._reading("amdsmi_get_gpu_vram_usage", handle)
        total = state.model.vram_size_mb // self._num_partitions(state)  # each XCP reports its share, in MB
        return {"vram_total": total, "vram_used": min(total, int(total * self.load.current(key).memory_fraction))}

    def amdsmi_get_power_info(self, handle: FakeHandle) -> dict[str, Any]:
        state, _ = self._reading("amdsmi_get_power_info", handle)
        if handle.partition:
            # The SMU measures the socket: a secondary partition's handle reports no power (amd-smi shows N/A).
            return dict.fromkeys(
                ("socket_power", "current_socket_power", "average_socket_power", "gfx_voltage", "soc_voltage", "mem_voltage", "power_limit"), "N/A"
            )
        watts = round(self.load.current(_socket_key(handle.gpu_bdf)).power_fraction * state.model.power_limit_w)
        # MI300 and later report the current socket power, MI200 and earlier the average (amdsmi_power_info_t).
        current, average = (watts, "N/A") if state.model.accelerator_profiles else ("N/A", watts)
        return {"socket_power": watts, "current_socket_power": current, "average_socket_power": average,
                "gfx_voltage": "N/A", "soc_voltage": "N/A", "mem_voltage": "N/A", "power_limit": state.model.power_limit_w}  # fmt: skip

    def amdsmi_get_temp_metric(self, handle: FakeHandle, sensor_type: AmdSmiTemperatureType, metric: AmdSmiTemperatureMetric) -> int:
        self._reading("amdsmi_get_temp_metric", handle)
        if handle.partition or AmdSmiTemperatureType(sensor_type) != AmdSmiTemperatureType.HOTSPOT:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)  # one junction sensor per socket, on the primary
        if AmdSmiTemperatureMetric(metric) != AmdSmiTemperatureMetric.CURRENT:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
        return round(self.load.current(_socket_key(handle.gpu_bdf)).temperature_celsius)

    def _read_events(self, wanted: set[str], timeout_ms: int, num_elem: int) -> list[dict[str, Any]]:
        with self._lock:
            if not self._events:
                self._lock.wait(timeout=max(timeout_ms, 0) / 1000)
            taken, self._events = self._events[:num_elem], self._events[num_elem:]
        return [event for event in taken if event["event"] in wanted]

    # -- test controls (not part of amdsmi) ----------------------------------

    def inject_event(self, gpu_bdf: str, event: AmdSmiEvtNotificationType | str, message: str = "") -> None:
        """Queue an event as the kernel would report it for the GPU's primary partition."""
        name = event if isinstance(event, str) else AmdSmiEvtNotificationType(event).name
        with self._lock:
            self._events.append({"processor_handle": FakeHandle(gpu_bdf, 0), "event": name, "message": message})
            self._lock.notify_all()

    def inject_ecc(self, gpu_bdf: str, uncorrectable: int = 0, correctable: int = 0) -> None:
        state = self._gpus[gpu_bdf]
        state.uncorrectable += uncorrectable
        state.correctable += correctable

    def set_busy_partitions(self, addresses: Iterable[str]) -> None:
        """The partitions (by PCI address, partition 0's is the GPU's) that carry a workload now: they and their
        GPU's socket (power, temperature) read busy, every other partition idles."""
        keys = set(addresses)
        self.load.set_busy(keys | {_socket_key(f"{address.rsplit('.', 1)[0]}.0") for address in keys})

    def fail(self, call: str, gpu_bdf: str | None = None) -> None:
        """Make a metric call fail with AMDSMI_STATUS_UNKNOWN_ERROR, for one GPU or (None) every GPU."""
        self._failing.setdefault(call, set()).add(gpu_bdf)

    def current_mode(self, gpu_bdf: str) -> tuple[str | None, str | None]:
        state = self._gpus[gpu_bdf]
        return state.compute, state.memory
