"""The interface every vendor backend implements, and the types it exchanges with the core.

A backend owns everything vendor-specific: reading its library (NVML, amdsmi,
sysfs), turning what it finds into the vendor-neutral Inventory, validating its
opaque configuration, and producing the container edits (device nodes, env,
mounts, hooks) for allocated devices. It never sees gRPC, CDI files or the API
server. Backends are found through the `dra_driver.vendors` entry-point group
(dra_driver.backend.registry), so a separate package can add a vendor.
"""

from __future__ import annotations

import functools
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

from dra_driver.model.device import DeviceTaint, Inventory

Partitioning = Literal["static", "dynamic"]


@dataclass(frozen=True)
class Profile:
    """A hardware profile: per-vendor simulator input (loaded by dra_driver.backend.hardware_profiles)."""

    name: str
    description: str
    sections: Mapping[str, Mapping[str, Any]]  # vendor -> simulator input
    source: Path


@dataclass(frozen=True)
class BackendSettings:
    """Node-level settings shared by all backends."""

    node_name: str = "node"
    # static: publish partitions that exist (MIG devices, AMD XCPs).
    # dynamic: publish every possible placement with shared counters
    # (needs the DRAPartitionableDevices gate) and create partitions at prepare.
    partitioning: Partitioning = "static"
    sysfs_root: Path = Path("/sys")
    dev_root: Path = Path("/dev")
    # Where this process sees the vendor driver's files (NVIDIA driver root, ROCm root).
    driver_root: Path = Path("/")
    # The same root as the host's container runtime sees it, for paths written into CDI specs
    # (the plugin container mounts the host's / or /run/nvidia/driver elsewhere); None: driver_root.
    host_driver_root: Path | None = None
    # Host path of NVIDIA's CDI hook binary (nvidia-cdi-hook or nvidia-ctk); None: no hooks in specs.
    nvidia_cdi_hook_path: str | None = None
    # Directory a backend may use for its own on-disk state (the plugin data dir).
    state_dir: Path | None = None
    # Simulation in a real cluster (`run --simulated-root`): a host path, mounted at the same path in the pod,
    # where a simulated backend keeps the files CDI specs name (dra_driver.simulation.node); None: its scratch dir.
    simulated_root: Path | None = None
    # MPS: switch a GPU a claim holds alone to the EXCLUSIVE_PROCESS compute mode (as NVIDIA's driver does) and
    # back on unprepare; False leaves every compute mode as it is (MPS still works, other processes may share).
    mps_exclusive_compute: bool = True
    # Consumable capacity (DRAConsumableCapacity): whole GPUs are published with allowMultipleAllocations and a
    # `memory` request policy, so several claims can share one, each held to its share (NVIDIA: through MPS).
    consumable_gpu_memory: bool = False


@dataclass(frozen=True)
class DeviceNode:
    path: str  # path inside the container
    host_path: str | None = None  # defaults to path
    type: str | None = None  # "c", "b", ...
    major: int | None = None
    minor: int | None = None
    permissions: str | None = None  # subset of "rwm"

    @classmethod
    def under(cls, path: str, dev_root: Path, type: str | None = None, permissions: str | None = None) -> DeviceNode:
        """The node the container sees at `path` (/dev/...), found on the host under `dev_root`
        (different from /dev when the plugin sees the host's /dev mounted elsewhere)."""
        host = _host_device_path(path, dev_root)
        return cls(path=path, host_path=None if host == path else host, type=type, permissions=permissions)


@functools.lru_cache(maxsize=4096)
def _host_device_path(path: str, dev_root: Path) -> str:
    # Cached: every prepare asks for the same few nodes, and a pathlib join costs more than the rest of edit building.
    return str(dev_root / path.removeprefix("/dev/"))


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    options: tuple[str, ...] = ()
    type: str | None = None


@dataclass(frozen=True)
class Hook:
    hook_name: str  # prestart, createRuntime, createContainer, startContainer, poststart, poststop
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None


_ENV_UNSAFE = re.compile(r"[^A-Za-z0-9]")


def env_name_part(text: str) -> str:
    """`text` (a driver or device name) as part of an environment variable's name: A-Z, 0-9 and '_' only."""
    return _ENV_UNSAFE.sub("_", text).upper()


@dataclass
class ContainerEdits:
    """What a container needs for a device; rendered into a CDI spec by dra_driver.node.cdi."""

    env: list[str] = field(default_factory=list)  # "NAME=VALUE"
    device_nodes: list[DeviceNode] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    hooks: list[Hook] = field(default_factory=list)

    def is_empty(self) -> bool:
        return not (self.env or self.device_nodes or self.mounts or self.hooks)

    def merged(self, other: ContainerEdits) -> ContainerEdits:
        """Both sets of edits, duplicates dropped, order kept."""

        def union(a: list[Any], b: list[Any]) -> list[Any]:
            return list(dict.fromkeys([*a, *b]))

        return ContainerEdits(
            env=union(self.env, other.env),
            device_nodes=union(self.device_nodes, other.device_nodes),
            mounts=union(self.mounts, other.mounts),
            hooks=union(self.hooks, other.hooks),
        )


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of this driver, with its resolved configuration."""

    request: str  # base request name (the "/<subrequest>" part stripped)
    pool: str
    device: str
    admin_access: bool = False
    share_id: str | None = None
    # Consumable capacity: what the allocation takes of a shared device, (qualified name, quantity) pairs as the
    # scheduler recorded them (unvalidated: a backend that enforces them parses them).
    consumed_capacity: tuple[tuple[str, str], ...] = ()
    # The opaque configuration that applies to this device after the API's
    # precedence rules, already validated by validate_config; None if none.
    config: BaseModel | None = None


@dataclass
class PreparedDevice:
    device: str
    edits: ContainerEdits


@dataclass
class PreparedClaim:
    devices: list[PreparedDevice]
    # Edits every container using any device of the claim gets (hooks, mounts).
    claim_edits: ContainerEdits = field(default_factory=ContainerEdits)
    # Edits that describe the devices of one request as a set, keyed by base request
    # name (e.g. HABANA_VISIBLE_DEVICES listing that request's devices). The kubelet hands
    # a container only the devices of the requests it names, so a list that spans requests
    # would expose another container's devices. CDI keeps the last value of an env name,
    # so a container naming two requests sees one request's list: prefer device nodes
    # (NVIDIA lists no devices in env at all; docs/plugin.md).
    request_edits: dict[str, ContainerEdits] = field(default_factory=dict)
    # JSON-serialisable state the backend needs to undo the preparation
    # (e.g. MIG GPU/compute instance IDs); stored in the checkpoint and handed
    # back to unprepare() and reconcile(). A state whose values are all empty
    # means "nothing to undo beyond unprepare(claim, {})": the plugin then skips
    # recording it before the CDI write.
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RecordedClaim:
    """What a backend's own on-disk records say a claim holds (start-up evidence when the checkpoint lost it)."""

    claim_uid: str
    devices: tuple[str, ...]  # device names in the pool
    state: dict[str, Any]  # a state unprepare() and reconcile() accept for this claim


@dataclass(frozen=True)
class HealthEvent:
    device: str  # device name in the pool
    healthy: bool
    reason: str  # human-readable, e.g. "XID 79 (GPU has fallen off the bus)"
    taint: DeviceTaint | None = None  # published while unhealthy (when taints are enabled)


@dataclass
class DeviceReadings:
    """What a vendor library reported for one device or partition handle (None: not reported), before the backend
    turns it into a DeviceSample; memory in bytes, utilization 0..1 or percent as the backend documents."""

    utilization: float | None = None
    memory_used: int | None = None
    memory_total: int | None = None
    power_watts: float | None = None
    temperature_celsius: float | None = None
    errors: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceSample:
    """One published device's readings, as its vendor library gives them (None: not reported by this device).

    A partition (MIG device, AMD XCP) reports what the library gives for the instance; where the library
    only measures the parent (utilization, power and temperature of a MIG device), `per_parent` names the
    readings taken from the parent GPU (docs/metrics.md, "Partitions")."""

    device: str  # device name in the pool
    uuid: str = ""
    pci_bus_id: str = ""  # Kubernetes form, "0000:1b:00.0"
    model: str = ""
    utilization: float | None = None  # 0..1
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_watts: float | None = None
    temperature_celsius: float | None = None
    errors: Mapping[str, int] = field(default_factory=dict)  # kind (ecc_corrected, ecc_uncorrected, xid, ...) -> count since boot
    sharing: str = "exclusive"  # exclusive, mps, time-slicing
    mps_daemons: Mapping[str, bool] = field(default_factory=dict)  # claim UID -> its MPS control daemon is alive
    per_parent: tuple[str, ...] = ()  # readings measured on the parent device (see above)


class VendorBackend(ABC):
    """One vendor's hardware on one node."""

    vendor: ClassVar[str]  # entry-point name and profile section key: "nvidia", "amd", "gaudi"
    driver_name: ClassVar[str]  # DRA driver name: "gpu.nvidia.com", ...

    @classmethod
    @abstractmethod
    def from_host(cls, settings: BackendSettings) -> VendorBackend:
        """Open the real library/sysfs; raise BackendUnavailable with a plain reason if it cannot run."""

    @classmethod
    @abstractmethod
    def from_profile(cls, section: Mapping[str, Any], settings: BackendSettings) -> VendorBackend:
        """Simulate the hardware described by a profile section by faking only the lowest layer."""

    @classmethod
    def profile_dir(cls) -> Path | None:
        """Directory with this vendor's shipped profiles (<name>.yaml), if any."""
        return None

    @abstractmethod
    def discover(self) -> Inventory:
        """The devices and counter sets of this node. A broken device is logged and skipped."""

    @abstractmethod
    def validate_config(self, parameters: Mapping[str, Any]) -> BaseModel:
        """Strictly validate opaque parameters; raise ConfigError naming the field and the fix."""

    @abstractmethod
    def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> PreparedClaim:
        """Make the devices usable for the claim; idempotent for the same claim and devices."""

    @abstractmethod
    def unprepare(self, claim: ClaimRef, state: Mapping[str, Any]) -> None:
        """Undo prepare using the state it returned; succeed if there is nothing left to undo."""

    def reconcile(self, live_states: Sequence[Mapping[str, Any]]) -> None:  # noqa: B027 - optional hook
        """After a restart: destroy dynamic partitions that no live claim state lists."""

    @property
    def undoes_from_own_records(self) -> bool:
        """Whether `unprepare(claim, {})` undoes everything `prepare` did for the claim from the backend's own
        durable records (under `state_dir`), wherever a kill -9 stopped prepare or the plugin after it: each change
        is recorded before it is made, and the records prove which partitions are the backend's.

        When True, the plugin does not record the state `prepare` returned before writing the CDI spec (one
        checkpoint write per claim fewer): a crash before PrepareCompleted rolls the claim back with the
        PrepareStarted record's empty state. The PrepareCompleted record holds the state as always.
        Default False: the state is recorded before the spec whenever it has a non-empty value."""
        return False

    def recorded_claims(self) -> list[RecordedClaim]:
        """Claims the backend's own records (kept under state_dir) show as holding devices.

        Read at start-up before reconcile: a claim listed here whose checkpoint record is
        lost or damaged keeps its devices reserved, and the state given here goes to
        reconcile and unprepare as the claim's. Default: the backend keeps no records.
        """
        return []

    def watch_health(self, stop: threading.Event) -> Iterator[HealthEvent]:
        """Yield health changes until `stop` is set. Default: no health source."""
        return iter(())

    def sample_devices(self) -> list[DeviceSample]:
        """Current readings of every published device, for the node's device metrics (a background thread calls it
        every --device-metrics-interval). Read-only towards the hardware; must not take a lock prepare holds for long.
        A device whose library calls fail is left out or reported with None readings, never raised for. Default: none."""
        return []

    def simulate_load(self, busy: Collection[str]) -> None:  # noqa: B027 - optional hook
        """Simulated backends only: the devices claims hold now, so the simulated library reports work on them
        (a real device is busy because its pod runs). Real backends ignore it."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the vendor library."""
