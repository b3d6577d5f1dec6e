"""AmdBackend: AMD Instinct GPUs through amdsmi, as the gpu.amd.com DRA driver."""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from dra_driver.common.errors import BackendUnavailable, DeviceError
from dra_driver.common.logs import fields
from dra_driver.model.device import Inventory
from dra_driver.backend import vocabulary
from dra_driver.backend.sysfs import pci_device_dir, pcie_root, read_text
from dra_driver.backend.interface import (
    AllocatedDevice,
    BackendSettings,
    ClaimRef,
    DeviceSample,
    HealthEvent,
    PreparedClaim,
    PreparedDevice,
    VendorBackend,
)

from dra_driver_amd import attributes, config, dynamic, edits, metrics
from dra_driver_amd.discovery import GpuInfo, discover_gpus
from dra_driver_amd.dynamic import Placement
from dra_driver_amd.health import HealthWatcher
from dra_driver_amd.modes import Mode
from dra_driver_amd.partitioner import Partitioner
from dra_driver_amd.profile import parse_profile
from dra_driver_amd.smi import Smi, SmiError, import_amdsmi

if TYPE_CHECKING:  # a real node never imports the simulation: from_profile loads it
    from dra_driver.simulation import scratch as sim_scratch

log = logging.getLogger(__name__)
PROFILE_DIR = Path(__file__).parent / "profiles"


@dataclass
class Catalog:
    """What the last discovery published, and how to prepare each device."""

    inventory: Inventory
    nodes: dict[str, tuple[int, int]] = field(default_factory=dict)  # existing device -> (card, render)
    placements: dict[str, Placement] = field(default_factory=dict)  # dynamic device -> placement
    gpus: dict[str, GpuInfo] = field(default_factory=dict)  # GPU BDF -> info
    devices_by_gpu: dict[str, list[str]] = field(default_factory=dict)


def _mode_state(mode: Mode) -> dict[str, Any]:
    return {"compute": mode.compute, "memory": mode.memory, "partitions": mode.partitions}


def _mode_from_state(data: Mapping[str, Any]) -> Mode:
    return Mode(str(data["compute"]), str(data["memory"]), int(data["partitions"]))


class AmdBackend(VendorBackend):
    vendor = "amd"
    driver_name = vocabulary.AMD_DRIVER

    def __init__(self, smi: Smi, settings: BackendSettings, owned_dir: sim_scratch.ScratchDir | None = None) -> None:
        self.smi = smi
        self.settings = settings
        self.health_poll_s = 5.0
        self._owned_dir = owned_dir
        self._lock = threading.RLock()
        self._catalog: Catalog | None = None
        self._partitioner = Partitioner(smi)
        # GPU BDF -> claim UID -> mode the claim's partitions need (dynamic partitioning).
        self._users: dict[str, dict[str, Mode]] = {}

    # -- opening -------------------------------------------------------------

    @classmethod
    def from_host(cls, settings: BackendSettings) -> AmdBackend:
        smi = Smi(import_amdsmi())
        try:
            smi.init()
        except SmiError as exc:
            raise BackendUnavailable(cls.vendor, f"{exc} (is the amdgpu kernel driver loaded?)") from exc
        try:
            handles = smi.processor_handles()
        except SmiError as exc:
            smi.shutdown()
            raise BackendUnavailable(cls.vendor, str(exc)) from exc
        if not handles:
            smi.shutdown()
            raise BackendUnavailable(cls.vendor, "no AMD GPUs")
        return cls(smi, settings)

    @classmethod
    def from_profile(cls, section: Mapping[str, Any], settings: BackendSettings) -> AmdBackend:
        from dra_driver.simulation import scratch as sim_scratch
        from dra_driver.simulation.state import SimulatedState
        from dra_driver_amd.simulated.fake_amdsmi import FakeAmdSmi
        from dra_driver_amd.simulated.fake_sysfs import build_pci_tree

        profile = parse_profile(section)
        with ExitStack() as undo:  # an error before the backend exists releases what was made so far
            owned: sim_scratch.ScratchDir | None = None
            sysfs_root = settings.sysfs_root
            if sysfs_root == Path("/sys"):  # never write into the real /sys
                owned = undo.enter_context(sim_scratch.create(cls.vendor))
                sysfs_root = owned.path
            build_pci_tree(sysfs_root, profile)
            # With a state dir, the simulated GPUs keep their partition modes across restarts as real ones do.
            smi = Smi(FakeAmdSmi(profile, SimulatedState.for_settings(settings.state_dir, cls.vendor, dict(section))))
            smi.init()
            undo.callback(smi.shutdown)
            if not profile.gpus:
                raise BackendUnavailable(cls.vendor, "no AMD GPUs")
            backend = cls(smi, dataclasses.replace(settings, sysfs_root=sysfs_root), owned_dir=owned)
            undo.pop_all()  # the backend's close releases them from now on
            return backend

    @classmethod
    def profile_dir(cls) -> Path | None:
        return PROFILE_DIR

    # -- discovery -----------------------------------------------------------

    @property
    def dynamic(self) -> bool:
        return self.settings.partitioning == "dynamic"

    def _add_gpu(self, catalog: Catalog, gpu: GpuInfo) -> None:
        device_dir = pci_device_dir(self.settings.sysfs_root, gpu.bdf)
        root = pcie_root(device_dir)
        gpu.sysfs_product_name = read_text(device_dir / "product_name") or ""
        names: list[str] = []
        if self.dynamic and gpu.modes:
            gpu_catalog = dynamic.gpu_catalog(gpu, root)
            if gpu_catalog.counter_set is not None:
                catalog.inventory.counter_sets.append(gpu_catalog.counter_set)
            catalog.inventory.devices.extend(gpu_catalog.devices)
            catalog.placements.update({p.device: p for p in gpu_catalog.placements})
            names = [d.name for d in gpu_catalog.devices]
        elif gpu.is_partitioned:
            for partition in gpu.partitions:
                device = attributes.partition_device(gpu, partition, root)
                catalog.inventory.devices.append(device)
                catalog.nodes[device.name] = (partition.card, partition.render)
                names.append(device.name)
        else:
            device = attributes.gpu_device(gpu, root)
            catalog.inventory.devices.append(device)
            catalog.nodes[device.name] = (gpu.primary.card, gpu.primary.render)
            names.append(device.name)
        catalog.gpus[gpu.bdf] = gpu
        catalog.devices_by_gpu[gpu.bdf] = names

    def discover(self) -> Inventory:
        return self._rediscover().inventory

    def _rediscover(self) -> Catalog:
        with self._lock:
            catalog = Catalog(Inventory(self.driver_name))
            for gpu in discover_gpus(self.smi):
                self._add_gpu(catalog, gpu)
            self._catalog = catalog
            return catalog

    def _current_catalog(self) -> Catalog:
        return self._catalog if self._catalog is not None else self._rediscover()

    # -- configuration -------------------------------------------------------

    def validate_config(self, parameters: Mapping[str, Any]) -> BaseModel:
        return config.validate_config(parameters)

    # -- prepare / unprepare -------------------------------------------------

    def _prepare_existing(self, name: str) -> PreparedDevice | None:
        catalog = self._current_catalog()
        if name not in catalog.nodes and name not in catalog.placements:
            catalog = self._rediscover()  # the GPU may have been repartitioned since
        if name not in catalog.nodes:
            return None
        card, render = catalog.nodes[name]
        return PreparedDevice(name, edits.device_edits(card, render, self.settings.dev_root))

    def _prepare_placement(self, claim: ClaimRef, placement: Placement) -> PreparedDevice:
        users = self._users.setdefault(placement.gpu_bdf, {})
        conflicts = sorted(uid for uid, mode in users.items() if mode != placement.mode)
        if conflicts:
            raise DeviceError(
                placement.device,
                f"GPU {placement.gpu_bdf} is in use in mode {users[conflicts[0]].profile} by claim {conflicts[0]}; "
                f"cannot switch it to {placement.mode.profile}",
            )
        self._check_hive_idle(claim, placement)
        # Held before switching, so a failed switch is rolled back by prepare's release.
        users[claim.uid] = placement.mode
        self._partitioner.apply(placement.gpu_bdf, placement.mode)
        partition = self._partitioner.partition(placement.gpu_bdf, placement.index)
        return PreparedDevice(placement.device, edits.device_edits(partition.card, partition.render, self.settings.dev_root))

    def _check_hive_idle(self, claim: ClaimRef, placement: Placement) -> None:
        """Refuse a memory-mode change while another GPU of the XGMI hive is in use.

        The counters are per GPU, so the scheduler may allocate memory modes
        that differ within a hive; the amdgpu reload an NPS change needs
        applies to the whole hive and needs every GPU of it idle (AMD SMI partition docs).
        """
        catalog = self._current_catalog()
        gpu = catalog.gpus.get(placement.gpu_bdf)
        if gpu is None or not gpu.hive_id:
            return
        _, memory = self._partitioner.current(placement.gpu_bdf)
        if memory is None or memory == placement.mode.memory:
            return
        busy = sorted(
            (bdf, uid)
            for bdf, other in catalog.gpus.items()
            if bdf != placement.gpu_bdf and other.hive_id == gpu.hive_id
            for uid in self._users.get(bdf, {})
            if uid != claim.uid
        )
        if busy:
            users = ", ".join(f"{bdf} (claim {uid})" for bdf, uid in busy)
            raise DeviceError(
                placement.device,
                f"cannot change memory mode {memory} -> {placement.mode.memory} on GPU {placement.gpu_bdf}: the amdgpu "
                f"reload it needs applies to the whole XGMI hive 0x{gpu.hive_id:016x}, and these GPUs of the hive are "
                f"in use: {users}; retry when they are released, or select the hive's current memory mode "
                f'(memoryPartition == "{memory.lower()}")',
            )

    def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> PreparedClaim:
        with self._lock:
            # Resolve every device before touching hardware, so an unknown
            # device fails the claim without switching any GPU's mode.
            resolved = [self._resolve(allocated.device) for allocated in devices]
            held_before = {bdf for bdf, users in self._users.items() if claim.uid in users}
            try:
                return self._apply(claim, resolved)
            except Exception:
                # The plugin passes no state to unprepare after a failed
                # prepare: give back what this call took before raising.
                self._release(claim.uid, exclude=held_before)
                raise

    def _resolve(self, name: str) -> Placement | PreparedDevice:
        placement = self._current_catalog().placements.get(name)
        if placement is not None:
            return placement
        device = self._prepare_existing(name)
        if device is None:
            raise DeviceError(name, f"not a device of {self.driver_name} on this node (was the GPU removed or repartitioned?)")
        return device

    def _apply(self, claim: ClaimRef, resolved: Sequence[Placement | PreparedDevice]) -> PreparedClaim:
        prepared: list[PreparedDevice] = []
        placements: list[dict[str, Any]] = []
        for item in resolved:
            if isinstance(item, PreparedDevice):
                prepared.append(item)
                continue
            prepared.append(self._prepare_placement(claim, item))
            placements.append({"device": item.device, "gpu": item.gpu_bdf, "index": item.index, "mode": _mode_state(item.mode)})
        state: dict[str, Any] = {"claim": claim.uid, "devices": [d.device for d in prepared]}
        if placements:
            state["placements"] = placements
        return PreparedClaim(devices=prepared, state=state)

    def _release(self, claim_uid: str, exclude: Collection[str] = ()) -> None:
        """Drop the claim's hold on every GPU (but those in `exclude`) and restore GPUs left unused."""
        for gpu_bdf in [bdf for bdf, users in self._users.items() if claim_uid in users and bdf not in exclude]:
            self._users[gpu_bdf].pop(claim_uid, None)
            self._restore_if_unused(gpu_bdf)

    def _default_mode(self, gpu_bdf: str) -> Mode | None:
        gpu = self._current_catalog().gpus.get(gpu_bdf)
        return gpu.default_mode if gpu else None

    def _restore_if_unused(self, gpu_bdf: str) -> None:
        if self._users.get(gpu_bdf):
            return
        self._users.pop(gpu_bdf, None)
        default = self._default_mode(gpu_bdf)
        if default is None:
            return
        try:
            if self._partitioner.apply(gpu_bdf, default):
                log.info("AMD GPU restored to its default partition mode", extra=fields(bdf=gpu_bdf, mode=default.profile))
        except DeviceError as exc:
            log.warning("cannot restore default partition mode", extra=fields(bdf=gpu_bdf, error=str(exc)))

    def unprepare(self, claim: ClaimRef, state: Mapping[str, Any]) -> None:
        # By claim UID, not from `state`: after a failed prepare the plugin
        # passes an empty state, and the claim may still hold a GPU's mode.
        with self._lock:
            self._release(claim.uid)

    def reconcile(self, live_states: Sequence[Mapping[str, Any]]) -> None:
        """Rebuild who uses which mode from the checkpoint; restore GPUs nobody needs in another mode."""
        with self._lock:
            self._users = {}
            for state in live_states:
                uid = str(state.get("claim", ""))
                for entry in state.get("placements") or []:
                    self._users.setdefault(str(entry["gpu"]), {})[uid] = _mode_from_state(entry["mode"])
            if not self.dynamic:
                return
            for gpu_bdf in self._current_catalog().gpus:
                self._restore_if_unused(gpu_bdf)
            self.discover()

    # -- health and shutdown -------------------------------------------------

    def watch_health(self, stop: threading.Event) -> Iterator[HealthEvent]:
        catalog = self._current_catalog()
        watcher = HealthWatcher(
            smi=self.smi,
            handles={bdf: gpu.handle for bdf, gpu in catalog.gpus.items()},
            devices_of=lambda bdf: self._current_catalog().devices_by_gpu.get(bdf, []),
            poll_s=self.health_poll_s,
        )
        watcher.prime()
        return watcher.run(stop)

    # -- device metrics --------------------------------------------------------

    def sample_devices(self) -> list[DeviceSample]:
        """Readings of every published device. Never takes self._lock (prepare holds it through a partition-mode
        switch): the catalog is replaced whole by discovery, so one reference read sees a consistent one."""
        catalog = self._catalog
        if catalog is None:
            return []
        handles = metrics.live_handles(self.smi)
        samples: list[DeviceSample] = []
        for bdf, gpu in catalog.gpus.items():
            primary = handles.get(bdf)
            parent = metrics.read_handle(self.smi, primary, bdf, errors=True) if primary is not None else metrics.Readings()
            for name, (address, uuid) in self._addresses(catalog, gpu, primary).items():
                if address == bdf:
                    own: metrics.Readings | None = parent  # the whole GPU: its own handle is the primary
                elif address is not None and address in handles:
                    own = metrics.read_handle(self.smi, handles[address], address, errors=False)
                else:
                    own = None  # a placement not created now: only what the GPU reports
                samples.append(metrics.sample(name, gpu, uuid, own, parent))
        return samples

    def _addresses(self, catalog: Catalog, gpu: GpuInfo, primary: Any) -> dict[str, tuple[str | None, str]]:
        """Published device -> (partition PCI address now, or None when it does not exist now; its UUID)."""
        partitions = {partition.bdf: partition for partition in gpu.partitions}
        by_render = {attributes.partition_name(partition): partition for partition in gpu.partitions}
        current: tuple[str | None, str | None] | None = None
        found: dict[str, tuple[str | None, str]] = {}
        for name in catalog.devices_by_gpu.get(gpu.bdf, []):
            placement = catalog.placements.get(name)
            if placement is None:
                partition = by_render.get(name, gpu.primary if not gpu.is_partitioned else None)
                found[name] = (partition.bdf, partition.uuid or "") if partition is not None else (None, "")
                continue
            if current is None:  # the mode decides which placements exist now; read once per GPU
                current = self._current_mode(primary, gpu.bdf)
            exists = current == (placement.mode.compute, placement.mode.memory)
            address = metrics.partition_address(gpu.bdf, placement.index) if exists else None
            known = partitions.get(address) if address is not None else None
            found[name] = (address, (known.uuid or "") if known is not None else "")
        return found

    def _current_mode(self, primary: Any, bdf: str) -> tuple[str | None, str | None]:
        if primary is None:
            return (None, None)
        try:
            return self.smi.compute_partition(primary), self.smi.memory_partition(primary)
        except SmiError as exc:
            log.debug("cannot read the partition mode for device metrics", extra=fields(bdf=bdf, error=str(exc)))
            return (None, None)

    def simulate_load(self, busy: Collection[str]) -> None:
        # Only a simulated library takes a load; on a real node the simulation package is never imported.
        simulated = sys.modules.get("dra_driver_amd.simulated.fake_amdsmi")
        if simulated is None or not isinstance(self.smi.lib, simulated.FakeAmdSmi) or self._catalog is None:
            return
        catalog = self._catalog
        held: dict[str, str] = {}
        for gpu in catalog.gpus.values():
            for name, (address, _) in self._addresses(catalog, gpu, None).items():
                if name in busy:
                    placement = catalog.placements.get(name)
                    held[name] = address or (metrics.partition_address(gpu.bdf, placement.index) if placement else gpu.bdf)
        self.smi.lib.set_busy_partitions(held.values())

    @property
    def library(self) -> Any:
        """The amdsmi module object in use (the simulated one under a profile)."""
        return self.smi.lib

    def close(self) -> None:
        try:
            self.smi.shutdown()
        except SmiError as exc:
            log.debug("amdsmi shutdown failed", extra=fields(error=str(exc)))
        if self._owned_dir is not None:
            self._owned_dir.close()
            self._owned_dir = None
