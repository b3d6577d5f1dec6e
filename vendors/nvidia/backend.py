"""NvidiaBackend: the gpu.nvidia.com VendorBackend on NVML (real, or the simulated library for profiles)."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path, PurePosixPath
import sys
from typing import TYPE_CHECKING, Any, ClassVar

from dra_driver.common.errors import BackendUnavailable, DeviceError, DraError
from dra_driver.common.logs import fields
from dra_driver.model import quantity
from dra_driver.backend.vocabulary import NVIDIA_DRIVER
from dra_driver.model.device import CounterSet, Device, Inventory
from dra_driver.backend.interface import (
    AllocatedDevice,
    BackendSettings,
    ClaimRef,
    ContainerEdits,
    DeviceSample,
    HealthEvent,
    PreparedClaim,
    PreparedDevice,
    RecordedClaim,
    VendorBackend,
)
from dra_driver_nvidia import attributes, driver_files, edits, metrics, mig, mps, nvml
from dra_driver_nvidia.config import GpuConfig, MigDeviceConfig, NvidiaConfig, validate_config
from dra_driver_nvidia.discovery import GpuInfo, SystemInfo, kubernetes_bus_id, read_gpus, system_info
from dra_driver_nvidia.health import HealthWatcher, ignored_xids
from dra_driver_nvidia.mig import MigDevice, MigProfile
from dra_driver_nvidia.nvml import NvmlError, Placement
from dra_driver_nvidia.ownership import OwnedInstance, OwnershipJournal
from dra_driver_nvidia.profile import NvidiaSection, parse_section
from dra_driver_nvidia.sharing import SharedDevice, SharingManager
from dra_driver_nvidia.sharing_records import SharingRecords

if TYPE_CHECKING:  # a real node never imports the simulation: from_profile loads it
    from dra_driver.simulation import scratch as sim_scratch
    from dra_driver_nvidia.simulated import fake_nvml

log = logging.getLogger(__name__)
PROFILE_DIR = Path(__file__).parent / "profiles"
STATE_KEY = "migInstances"
# Claim state of a dynamic claim using GPUs whole (MIG mode held off): {"claim": uid, "gpus": [GPU uuid, ...]}.
WHOLE_KEY = "wholeGpus"
SHARING_KEY = "sharingClaim"  # the claim UID, in the state of a claim whose sharing changed something (sharing_records)
# Architectures whose MIG mode changes only at the next GPU reset (NVIDIA MIG user guide: A100/A30);
# a GPU that answers nvmlDeviceSetMigMode with RESET_REQUIRED is added at run time as well.
RESET_TO_SWITCH_MIG = frozenset({"Ampere"})
GiKey = tuple[str, int, int]  # (parent GPU uuid, GI profile ID, placement start)
StateEntry = Mapping[str, Any]  # one element of the claim state's STATE_KEY list


@dataclass
class _Published:
    """What the last discovery published, so prepare and health can map device names back to hardware."""

    system: SystemInfo
    gpus: dict[str, GpuInfo] = field(default_factory=dict)  # device name -> GPU offered whole
    by_uuid: dict[str, GpuInfo] = field(default_factory=dict)
    profiles: dict[str, list[MigProfile]] = field(default_factory=dict)  # GPU uuid -> profiles
    static_migs: dict[str, tuple[GpuInfo, MigDevice]] = field(default_factory=dict)
    placements: dict[str, tuple[GpuInfo, MigProfile, Placement]] = field(default_factory=dict)
    per_gpu: dict[str, list[str]] = field(default_factory=dict)  # GPU uuid -> device names

    def add(self, gpu: GpuInfo, name: str) -> None:
        self.per_gpu.setdefault(gpu.uuid, []).append(name)


@dataclass(frozen=True)
class _PlannedInstance:
    """A MIG instance a claim needs, checked free and not yet created."""

    gpu: GpuInfo
    profile: MigProfile
    placement: Placement
    intent: OwnedInstance
    existing: nvml.Handle | None  # the GI already at the placement (ours: idempotent prepare), as looked up

    @property
    def key(self) -> GiKey:
        return self.intent.key


class NvidiaBackend(VendorBackend):
    vendor: ClassVar[str] = "nvidia"
    driver_name: ClassVar[str] = NVIDIA_DRIVER

    def __init__(
        self,
        settings: BackendSettings,
        simulator: fake_nvml.FakeNvmlLibrary | None = None,
        sysfs_root: Path | None = None,
        proc_root: Path | None = Path("/proc"),
        scratch: sim_scratch.ScratchDir | None = None,  # simulation only: removed by close
        files: driver_files.DriverFiles | None = None,
        driver_root: Path | None = None,  # where this process runs the driver's binaries; default settings.driver_root
    ) -> None:
        self.settings = settings
        # The host driver's user-space files, found once at start (their version is the kernel driver's).
        self._files = files
        self._claim_edits_cache: ContainerEdits | None = None
        self.simulator = simulator
        self._sysfs_root = sysfs_root or settings.sysfs_root
        self._mig_minors = edits.MigMinors(proc_root)
        self._scratch = scratch
        self._lock = threading.RLock()
        self._published: _Published | None = None
        self._dynamic_by_gi: dict[tuple[str, int], str] = {}  # (GPU uuid, GI id) -> device name
        # GPU instances this driver created or a live claim lists; every other instance belongs to
        # someone else (an admin, mig-parted) and is never reused, offered as free, or destroyed.
        # With settings.state_dir (production passes one) creations are also journaled on disk, so
        # an instance whose claim state was never saved (kill -9 inside prepare) is still known
        # as ours after a restart; without it ownership lives in this process only.
        self._journal = OwnershipJournal.under(settings.state_dir)
        self._owned: set[GiKey] = {entry.key for entry in self._journal.all_entries()}
        self._needs_reset: set[str] = set()  # GPU uuids seen to answer RESET_REQUIRED
        # Dynamic partitioning: GPU uuid -> claims using the GPU whole, whose MIG mode must stay off until released.
        self._whole_users: dict[str, set[str]] = {}
        self._compute_profiles = mig.ComputeProfiles()  # read once per (GPU, GI profile), not per lookup
        self._mig_slots: dict[str, int] = {}  # GPU uuid -> its MIG device count (the board's: read once)
        self._xids: Counter[str] = Counter()  # GPU uuid -> XID events seen by the health watcher (the xid error counter)
        self._xid_lock = threading.Lock()
        self._sharing = _sharing_manager(settings, files, driver_root or settings.driver_root, scratch, simulated=simulator is not None)

    # ---- opening ------------------------------------------------------------------

    @classmethod
    def from_host(cls, settings: BackendSettings) -> NvidiaBackend:
        simulated = sys.modules.get("dra_driver_nvidia.simulated.fake_nvml")  # not imported: nothing simulated was installed
        if simulated is not None and isinstance(simulated.installed(), simulated.FakeNvmlLibrary):
            simulated.install(None)  # a simulated library left behind must not stand in for the host
        _start_nvml(settings.driver_root)
        try:
            version = nvml.driver_version()
        except NvmlError as exc:
            # Both the published driverVersion attribute and the driver files every claim's spec mounts are
            # named by this version: without it no container could use CUDA, so the backend does not start.
            nvml.shutdown()
            raise BackendUnavailable(
                "nvidia", f"NVML reports no driver version ({exc}); the driver files containers need are found by it: "
                "check the driver installation (nvidia-smi should print the version)"
            ) from exc
        if settings.host_driver_root is None and settings.driver_root != Path("/"):
            # Inside a pod the driver root is a mount (/driver-root) the host's runtime cannot see.
            log.warning("--host-driver-root not set: CDI specs name driver files under --driver-root, which must then "
                        "be the same path on the host", extra=fields(driver_root=str(settings.driver_root)))  # fmt: skip
        return cls(settings, files=driver_files.discover(settings.driver_root, version, settings.host_driver_root))

    @classmethod
    def from_profile(cls, section: Mapping[str, Any], settings: BackendSettings) -> NvidiaBackend:
        from dra_driver.simulation import node as sim_node, scratch as sim_scratch
        from dra_driver.simulation.state import SimulatedState
        from dra_driver_nvidia.simulated import fake_driver_root, fake_nvml

        parsed = parse_section(section)
        # With a state dir, the simulated GPUs keep MIG modes and instances across restarts as real ones do.
        state = SimulatedState.for_settings(settings.state_dir, cls.vendor, parsed.model_dump(mode="json"))
        simulator = fake_nvml.FakeNvmlLibrary(parsed, state)
        fake_nvml.install(simulator)
        try:
            _start_nvml()
        except BackendUnavailable:
            fake_nvml.install(None)
            raise
        with ExitStack() as undo:  # an error before the backend exists releases what was made so far
            undo.callback(_stop_simulated_nvml, simulator)
            scratch = undo.enter_context(sim_scratch.create(cls.vendor))
            _write_sysfs(scratch.path, parsed)
            # A simulated driver root for the profile's driver version; the runtime on this host sees it where we do
            # (in a pod: on the simulated root, shared by every driver pod, as a real driver install would be).
            version = parsed.driverVersion
            if settings.simulated_root is not None:
                root = sim_node.build_shared(settings.simulated_root, f"nvidia-driver-root-{version}", lambda d: fake_driver_root.build(d, version))
            else:
                root = fake_driver_root.build(scratch.path / "driver-root", version)
            files = driver_files.discover(root, parsed.driverVersion)
            backend = cls(settings, simulator=simulator, sysfs_root=scratch.path, proc_root=None, scratch=scratch, files=files,
                          driver_root=root)  # fmt: skip
            undo.pop_all()  # the backend's close releases both from now on
            return backend

    @classmethod
    def profile_dir(cls) -> Path:
        return PROFILE_DIR

    def close(self) -> None:
        if self._scratch is not None:
            self._sharing.stop_all()  # simulation leaves no daemon running; a host's outlive a restart on purpose
        if self.simulator is not None:
            _stop_simulated_nvml(self.simulator)
        else:
            _shutdown_nvml()
        if self._scratch is not None:
            self._scratch.close()

    # ---- discovery ----------------------------------------------------------------

    def discover(self) -> Inventory:
        with self._lock:
            self._compute_profiles.forget()  # discovery re-reads the GPUs: so does the next lookup
            published = _Published(system=system_info())
            inventory = Inventory(driver=self.driver_name)
            for gpu in read_gpus(self._sysfs_root):
                if any(other.name == gpu.name for other in published.by_uuid.values()):
                    # Two GPUs with one minor number would give two devices of one name and the
                    # API server would reject the whole pool; publish the first only.
                    log.warning("skipping GPU: its minor number is already used", extra=fields(gpu=gpu.name, uuid=gpu.uuid))
                    continue
                try:
                    devices, counters = self._gpu_devices(gpu, published)
                except (NvmlError, DeviceError) as exc:
                    log.warning("skipping GPU", extra=fields(gpu=gpu.name, uuid=gpu.uuid, error=str(exc)))
                    continue
                inventory.devices.extend(devices)
                inventory.counter_sets.extend(counters)
                if any(device.name == gpu.name for device in devices):  # offered whole
                    published.gpus[gpu.name] = gpu
                published.by_uuid[gpu.uuid] = gpu
                for device in devices:
                    published.add(gpu, device.name)
            self._published = published
            return inventory

    def _gpu_devices(self, gpu: GpuInfo, published: _Published) -> tuple[list[Device], list[CounterSet]]:
        system, node = published.system, self.settings.node_name
        profiles = self._profiles(gpu)
        published.profiles[gpu.uuid] = profiles
        if self.settings.partitioning == "dynamic" and profiles and (gpu.mig_enabled or self._can_switch_mig(gpu)):
            return self._dynamic_devices(gpu, profiles, published)
        if gpu.mig_enabled:
            # In MIG mode the parent is not usable as a whole: publish its MIG devices only.
            return self._static_mig_devices(gpu, profiles, published, lambda _device: True), []
        # Static mode, or a GPU that cannot leave whole-GPU mode without a reset: the GPU itself.
        device = attributes.gpu_device(gpu, system, node, profiles)
        if self.settings.consumable_gpu_memory:
            attributes.shareable(device, gpu.memory_bytes)
        return [device], []

    def _can_switch_mig(self, gpu: GpuInfo) -> bool:
        """Whether prepare may switch this GPU's MIG mode now (no reset, nothing pending)."""
        return gpu.architecture not in RESET_TO_SWITCH_MIG and gpu.uuid not in self._needs_reset and gpu.mig_enabled == gpu.mig_pending

    def _static_mig_devices(
        self, gpu: GpuInfo, profiles: list[MigProfile], published: _Published, keep: Callable[[MigDevice], bool]
    ) -> list[Device]:
        by_id = {profile.info.id: profile.info for profile in profiles}
        devices = []
        for mig_device in mig.read_mig_devices(gpu.handle, by_id):
            if not keep(mig_device):
                continue
            device = attributes.static_mig_device(gpu, published.system, mig_device)
            published.static_migs[device.name] = (gpu, mig_device)
            devices.append(device)
        return devices

    def _dynamic_devices(self, gpu: GpuInfo, profiles: list[MigProfile], published: _Published) -> tuple[list[Device], list[CounterSet]]:
        """Placements we may create, around the instances someone else created (published as static MIG devices).

        The whole GPU is offered only when prepare could switch MIG off for it: MIG mode is off
        already, or it can be switched without a reset and no foreign instance is in the way.
        """
        system, node = published.system, self.settings.node_name
        live = mig.live_instances(gpu.handle, profiles) if gpu.mig_enabled else []
        by_id = {profile.info.id: profile.info for profile in profiles}
        foreign = [info for _, info in live if (gpu.uuid, info.profile_id, info.placement.start) not in self._owned]
        taken = [(by_id[info.profile_id], info.placement) for info in foreign]
        busy = {s for _, p in taken for s in range(p.start, p.start + p.size)}
        counters = attributes.counter_set(gpu, profiles, attributes.memory_slice_count(profiles), taken)
        devices: list[Device] = []
        if not gpu.mig_enabled or (self._can_switch_mig(gpu) and not foreign):
            devices.append(attributes.dynamic_gpu_device(gpu, system, node, profiles, counters))
        foreign_ids = {info.id for info in foreign}
        devices += self._static_mig_devices(gpu, profiles, published, lambda device: device.gi_id in foreign_ids)
        for profile in profiles:
            for placement in profile.placements:
                if busy & set(range(placement.start, placement.start + placement.size)):
                    continue  # overlaps an instance that is not ours
                device = attributes.dynamic_mig_device(gpu, system, profile, placement)
                published.placements[device.name] = (gpu, profile, placement)
                devices.append(device)
        if foreign:
            log.info("MIG instances not created by this driver are left alone",
                     extra=fields(gpu=gpu.name, instances=sorted(info.id for info in foreign)))
        return devices, [counters]

    @staticmethod
    def _profiles(gpu: GpuInfo) -> list[MigProfile]:
        """The GPU's MIG profiles; [] when it has none, or when the query fails on a GPU that is
        not in MIG mode: then it is published whole, without the profile-derived engine counts
        (and without partitions in dynamic mode). A GPU in MIG mode cannot be described without them."""
        if not gpu.mig_capable:
            return []
        try:
            return mig.read_profiles(gpu.handle)
        except NvmlError as exc:
            if gpu.mig_enabled or exc.gpu_lost:
                raise
            log.warning("MIG profiles unreadable; publishing the whole GPU without engine counts or partitions",
                        extra=fields(gpu=gpu.name, call=exc.call, error=exc.detail))
            return []

    def _index(self) -> _Published:
        if self._published is None:
            self.discover()
        assert self._published is not None
        return self._published

    # ---- configuration and preparation ------------------------------------------------

    def validate_config(self, parameters: Mapping[str, Any]) -> NvidiaConfig:
        return validate_config(parameters)

    def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> PreparedClaim:
        with self._lock, self._journal.held(claim.uid):
            index = self._index()
            created: list[dict[str, Any]] = []
            prepared: dict[int, PreparedDevice] = {}
            planned: dict[int, _PlannedInstance] = {}
            uuids: dict[int, str] = {}
            try:
                for slot, allocated in enumerate(devices):
                    ready = self._prepare_device(index, claim, allocated.device)
                    if isinstance(ready, _PlannedInstance):
                        planned[slot] = ready
                    else:
                        prepared[slot], uuids[slot] = _prepared_device(allocated.device, *ready), ready[1]
                made = self._create_instances(claim, list(planned.values()), created)
                for slot, (device_edits, uuid) in zip(planned, made, strict=True):
                    prepared[slot], uuids[slot] = _prepared_device(devices[slot].device, device_edits, uuid), uuid
                shared = self._sharing.prepare(claim.uid, [self._shared_device(index, d, uuids[s]) for s, d in enumerate(devices)])
            except (NvmlError, DraError) as exc:
                self._undo_sharing(claim)
                self._destroy(claim, created)  # leave nothing half-done behind
                self._release_whole(claim.uid)
                if isinstance(exc, DraError):
                    raise
                raise DeviceError(allocated.device, f"prepare for claim {claim.namespace}/{claim.name} failed: {exc}") from exc
            state: dict[str, Any] = {STATE_KEY: created}
            whole = sorted(uuid for uuid, users in self._whole_users.items() if claim.uid in users)
            if whole:
                state[WHOLE_KEY] = {"claim": claim.uid, "gpus": whole}
            claim_edits = self._claim_edits()
            if shared is not None:
                state[SHARING_KEY] = claim.uid
                claim_edits = claim_edits.merged(shared)
            return PreparedClaim(
                devices=[prepared[slot] for slot in range(len(devices))], claim_edits=claim_edits,
                request_edits=_request_env(devices), state=state,
            )  # fmt: skip

    def _shared_device(self, index: _Published, allocated: AllocatedDevice, uuid: str) -> SharedDevice:
        name = allocated.device
        gpu = index.gpus.get(name) or (index.static_migs.get(name) or index.placements[name])[0]
        config = allocated.config if isinstance(allocated.config, (GpuConfig, MigDeviceConfig)) else None
        whole = name in index.gpus
        return SharedDevice(
            name=name, uuid=uuid, gpu_uuid=gpu.uuid, handle=gpu.handle, whole=whole,
            exclusive=allocated.share_id is None and not allocated.admin_access, sharing=config.sharing if config else None,
            memory_bytes=gpu.memory_bytes if whole else 0, memory_share=_memory_share(allocated) if whole else None,
        )  # fmt: skip

    def _undo_sharing(self, claim: ClaimRef) -> None:
        """Rollback of a failed prepare's sharing; what cannot be undone stays recorded (the next unprepare retries)."""
        try:
            self._sharing.unprepare(claim.uid, self._handles)
        except DraError as exc:
            log.error("rollback of a claim's GPU sharing failed; its record stays", extra=fields(claim=claim.uid, error=str(exc)))

    def _handles(self) -> dict[str, nvml.Handle]:
        return {uuid: gpu.handle for uuid, gpu in self._index().by_uuid.items()}

    def _claim_edits(self) -> ContainerEdits:
        """Once per container using the claim: the driver's files, and the legacy-runtime switch-off."""
        cached = self._claim_edits_cache
        if cached is None:
            files = self._files or driver_files.DriverFiles(version="", host_root=Path("/"))
            cached = driver_files.claim_edits(files, self.settings.nvidia_cdi_hook_path)
            cached.env.insert(0, edits.VISIBLE_DEVICES_VOID)
            self._claim_edits_cache = cached
        return ContainerEdits(env=list(cached.env), mounts=list(cached.mounts), hooks=list(cached.hooks))

    def _prepare_device(self, index: _Published, claim: ClaimRef, name: str) -> tuple[ContainerEdits, str] | _PlannedInstance:
        """(edits, uuid) of a device that exists; a placement is checked free and returned for `_create_instances`."""
        dev_root = self.settings.dev_root
        if name in index.gpus:
            gpu = index.gpus[name]
            if self.settings.partitioning == "dynamic" and index.profiles.get(gpu.uuid):
                self._set_mig_mode(gpu, claim, enabled=False)
                self._whole_users.setdefault(gpu.uuid, set()).add(claim.uid)  # holds MIG mode off until released
            return edits.gpu_edits(gpu.minor, dev_root), gpu.uuid
        if name in index.static_migs:
            gpu, mig_device = index.static_migs[name]
            return edits.mig_edits(gpu.minor, mig_device.gi_id, mig_device.ci_id, dev_root, self._mig_minors), mig_device.uuid
        if name in index.placements:
            gpu, profile, placement = index.placements[name]
            self._set_mig_mode(gpu, claim, enabled=True)
            existing = mig.find_instance(gpu.handle, profile.info.id, placement.start, profile.info.instance_count)
            if existing is not None and (gpu.uuid, profile.info.id, placement.start) not in self._owned:
                raise DeviceError(name, "its placement holds a MIG device this driver did not create (admin-created?); "
                                        "it is never taken over: run discovery again, or destroy it with nvidia-smi mig -dci/-dgi")
            intent = OwnedInstance(claim.uid, name, gpu.uuid, profile.info.id, placement.start)
            return _PlannedInstance(gpu, profile, placement, intent, existing)
        raise DeviceError(name, f"is not a device of this node's {self.driver_name} pool (was it removed? run discovery again)")

    def _create_instances(
        self, claim: ClaimRef, planned: Sequence[_PlannedInstance], created: list[dict[str, Any]]
    ) -> list[tuple[ContainerEdits, str]]:
        """Create a claim's MIG instances: one journal write naming all of them before the first.

        A kill -9 anywhere leaves each instance that exists named in the journal: before the write
        nothing was created; after it every placement is an intent (rollback and reconcile destroy what
        is at it, and drop an intent with nothing there). The GI/CI IDs are not journaled: they go in the
        claim state the plugin records next, and an intent already names the instance by its placement,
        which is how reconcile matches instances anyway. Each instance appended to `created` is rolled
        back by the caller.
        """
        if not planned:
            return []
        self._journal_record(*(item.intent for item in planned))  # before creating: a crash from here on still leaves our mark
        self._owned.update(item.key for item in planned)
        instances: list[mig.CreatedInstance] = []
        for number, item in enumerate(planned):
            gpu, profile, placement, name = item.gpu, item.profile, item.placement, item.intent.device
            try:
                compute_profiles = partial(self._compute_profiles.of, gpu.uuid)
                instance = mig.create_instance_in(gpu.handle, profile, placement, item.existing, compute_profiles, find_uuid=False)
            except NvmlError as exc:
                self._compute_profiles.forget(gpu.uuid)  # in case what NVML answered before is stale now
                # create_instance_in undid its own GI; this and the later intents made nothing. Whatever is at
                # the placement now is not destroyed by placement: it may have appeared behind our back.
                self._forget_intents(claim, planned[number:])
                raise DeviceError(name, f"prepare for claim {claim.namespace}/{claim.name} failed: {exc}") from exc
            created.append(
                {"device": name, "parentUUID": gpu.uuid, "giId": instance.gi_id, "ciId": instance.ci_id,
                 "profileId": profile.info.id, "start": placement.start}
            )  # fmt: skip
            instances.append(instance)
            self._dynamic_by_gi[(gpu.uuid, instance.gi_id)] = name
        uuids = self._mig_uuids(claim, planned, instances)  # failing: rolled back via `created`
        made: list[tuple[ContainerEdits, str]] = []
        for item, instance, entry in zip(planned, instances, created[-len(planned):], strict=True):
            entry["uuid"] = uuid = uuids[(item.gpu.uuid, instance.gi_id, instance.ci_id)]
            log.info("created MIG device", extra=fields(device=item.intent.device, gi=instance.gi_id, ci=instance.ci_id, uuid=uuid))
            mig_edits = edits.mig_edits(item.gpu.minor, instance.gi_id, instance.ci_id, self.settings.dev_root, self._mig_minors)
            made.append((mig_edits, uuid))
        return made

    def _mig_uuids(
        self, claim: ClaimRef, planned: Sequence[_PlannedInstance], instances: Sequence[mig.CreatedInstance]
    ) -> dict[tuple[str, int, int], str]:
        """(GPU uuid, GI id, CI id) -> MIG UUID of each instance just created: one walk of each GPU's MIG devices."""
        wanted: dict[str, tuple[GpuInfo, set[tuple[int, int]]]] = {}
        for item, instance in zip(planned, instances, strict=True):
            wanted.setdefault(item.gpu.uuid, (item.gpu, set()))[1].add((instance.gi_id, instance.ci_id))
        found: dict[tuple[str, int, int], str] = {}
        for gpu, pairs in wanted.values():
            try:
                slots = self._mig_slots.get(gpu.uuid) or nvml.max_mig_device_count(gpu.handle)
                self._mig_slots[gpu.uuid] = slots
                found.update({(gpu.uuid, gi, ci): uuid for (gi, ci), uuid in mig.mig_uuids(gpu.handle, pairs, slots).items()})
            except NvmlError as exc:
                raise DeviceError(gpu.name, f"prepare for claim {claim.namespace}/{claim.name} failed: {exc}") from exc
        return found

    def _forget_intents(self, claim: ClaimRef, planned: Sequence[_PlannedInstance]) -> None:
        """Intents of instances never created: those placements are not ours (unless their GI was before)."""
        self._owned.difference_update(item.key for item in planned if item.existing is None)
        if planned:
            self._journal_remove(claim.uid, *(item.key for item in planned))

    def _set_mig_mode(self, gpu: GpuInfo, claim: ClaimRef, enabled: bool) -> None:
        """Switch MIG mode for a dynamic claim, never while another claim uses the GPU (normal operation: logged at info).

        A change that would only be pending (the GPU needs a reset, as on A100) is undone and
        refused, so the GPU never sits in a state its published devices do not describe.
        """
        current, _pending = nvml.mig_mode(gpu.handle)
        if bool(current) == enabled:
            return
        action = "enable" if enabled else "disable"
        self._refuse_mode_change_in_use(gpu, enabled)
        try:
            activation = nvml.set_mig_mode(gpu.handle, enabled)
        except NvmlError as exc:
            raise DeviceError(gpu.name, f"cannot {action} MIG mode: {exc}") from exc
        now, _ = nvml.mig_mode(gpu.handle)
        if bool(now) != enabled:
            self._needs_reset.add(gpu.uuid)
            try:
                nvml.set_mig_mode(gpu.handle, bool(now))  # withdraw the pending change
            except NvmlError as exc:
                log.warning("cannot withdraw pending MIG mode change", extra=fields(gpu=gpu.name, error=str(exc)))
            raise DeviceError(gpu.name, f"cannot {action} MIG mode without a GPU reset "
                                        f"(activation status {nvml.error_name(activation)}); run discovery again: "
                                        "the GPU is now published in its current mode only")
        gpu.mig_enabled = gpu.mig_pending = enabled
        self._compute_profiles.forget(gpu.uuid)
        log.info("switched MIG mode for a claim", extra=fields(gpu=gpu.name, enabled=enabled, claim=claim.uid))

    def _refuse_mode_change_in_use(self, gpu: GpuInfo, enabling: bool) -> None:
        """A GPU a claim uses whole (MIG off) or through any MIG instance (MIG on) keeps its mode: its containers depend on it."""
        if enabling:
            holders = sorted(self._whole_users.get(gpu.uuid, set()))
            if holders:
                raise DeviceError(gpu.name, f"cannot enable MIG mode: claim {holders[0]} uses the GPU whole; "
                                            "its partitions can be prepared once that claim is released")  # fmt: skip
            return
        live = [info.id for _, info in mig.live_instances(gpu.handle, self._index().profiles.get(gpu.uuid) or [])]
        if live:
            raise DeviceError(gpu.name, f"cannot disable MIG mode: MIG instances {sorted(live)} exist on it (claims or an "
                                        "admin use them); the whole GPU can be prepared once they are gone")  # fmt: skip

    def _release_whole(self, claim_uid: str) -> None:
        for uuid in [uuid for uuid, users in self._whole_users.items() if claim_uid in users]:
            self._whole_users[uuid].discard(claim_uid)
            if not self._whole_users[uuid]:
                del self._whole_users[uuid]

    def _journal_record(self, *entries: OwnedInstance) -> None:
        try:
            self._journal.record(*entries)
        except OSError as exc:
            # Creating an instance we could not prove ours after a crash would risk a leak: refuse.
            raise DeviceError(entries[0].device, f"cannot record MIG instance ownership in {self._journal.directory}: {exc}") from exc

    def _journal_remove(self, claim_uid: str, *keys: GiKey) -> None:
        try:
            self._journal.remove(claim_uid, set(keys))
        except OSError as exc:
            # A stale entry is harmless: the next start drops it (its placement is then empty or listed).
            log.warning("cannot update MIG ownership record", extra=fields(claim=claim_uid, error=str(exc)))

    @property
    def undoes_from_own_records(self) -> bool:
        """With a state dir, yes: every MIG instance is journaled by placement before it is created and every sharing
        change is recorded before it is made, so `unprepare(claim, {})` finds and undoes them all
        (tests/nvidia/test_mig_crash_points.py kills each step). Without one both live in this process only."""
        return self._journal.directory is not None and self._sharing.records.directory is not None

    def unprepare(self, claim: ClaimRef, state: Mapping[str, Any]) -> None:
        """Destroy the instances the state lists, and those the journal holds for the claim.

        The journal matters for a rollback with an empty state: the daemon died after the
        instance was created but before the plugin saved the claim's state.
        """
        with self._lock, self._journal.held(claim.uid):
            self._sharing.unprepare(claim.uid, self._handles)  # the daemon stops before its MIG device goes
            self._release_whole(claim.uid)
            listed = list(state.get(STATE_KEY) or [])
            listed_keys = {_entry_key(entry) for entry in listed}
            recorded = [_state_entry(e) for e in self._journal.entries(claim.uid) if e.key not in listed_keys]
            self._destroy(claim, listed + recorded, strict=True)
            self._journal_remove(claim.uid)  # also drops a corrupt record; entries on unknown GPUs stay

    def _destroy(self, claim: ClaimRef, instances: Sequence[StateEntry], strict: bool = False) -> None:
        """Destroy the instances, then drop the journal entries of those now gone in one write.

        An entry outliving its instance (kill -9 before that write) is what a destroy whose journal
        update failed leaves too: unprepare and reconcile find the instance gone and drop the entry,
        and the claim's checkpoint record keeps its devices reserved until its unprepare completes.
        """
        index = self._index()
        gone_keys: list[GiKey] = []
        try:
            for entry in instances:
                gpu = index.by_uuid.get(str(entry.get("parentUUID")))
                if gpu is None:
                    log.warning("MIG instance of an unknown GPU left alone", extra=fields(**dict(entry)))
                    continue
                key = _entry_key(entry)
                try:
                    gone = self._destroy_entry(gpu, entry)
                except NvmlError as exc:
                    if strict:
                        raise DeviceError(str(entry.get("device")), f"cannot destroy its MIG instance: {exc}") from exc
                    log.warning("rollback of a MIG instance failed", extra=fields(device=entry.get("device"), error=str(exc)))
                    continue
                if entry.get("giId") is not None:
                    self._dynamic_by_gi.pop((gpu.uuid, int(entry["giId"])), None)
                self._owned.discard(key)
                gone_keys.append(key)
                log.info("destroyed MIG device" if gone else "MIG device already gone", extra=fields(device=entry.get("device")))
        finally:
            if gone_keys:
                self._journal_remove(claim.uid, *gone_keys)

    def _destroy_entry(self, gpu: GpuInfo, entry: StateEntry) -> bool:
        """Destroy one recorded instance; an intent (no GI ID yet) by profile and placement, if one exists there."""
        profile_id, start = int(entry["profileId"]), int(entry["start"])
        compute_profiles = partial(self._compute_profiles.of, gpu.uuid)
        try:
            if entry.get("giId") is not None:
                return mig.destroy_instance(gpu.handle, int(entry["giId"]), profile_id, start, compute_profiles)
            if not nvml.mig_mode(gpu.handle)[0]:
                return False
            gi = mig.find_instance(gpu.handle, profile_id, start)
            if gi is None:
                return False  # the crash came before the creation
            mig.destroy_gpu_instance_tree(gi, profile_id, compute_profiles)
        except NvmlError:
            self._compute_profiles.forget(gpu.uuid)  # in case what NVML answered before is stale now
            raise
        return True

    def recorded_claims(self) -> list[RecordedClaim]:
        """The claims the ownership journal names whose instance exists now, each with those instances as state.

        An entry whose instance is gone proves nothing is in use (a destroy whose journal update failed);
        it must not block the placement, so it is left to reconcile to drop.
        """
        with self._lock:
            index = self._index()
            by_claim: dict[str, list[OwnedInstance]] = {}
            for entry in self._journal.all_entries():
                gpu = index.by_uuid.get(entry.parent_uuid)
                if gpu is None:
                    continue  # a GPU not seen now: nothing of it can be handed out either
                try:
                    live = bool(nvml.mig_mode(gpu.handle)[0]) and mig.find_instance(gpu.handle, entry.profile_id, entry.start) is not None
                except NvmlError as exc:  # cannot tell: keep the reservation
                    log.warning("cannot check a journaled MIG instance; kept as in use", extra=fields(device=entry.device, error=str(exc)))
                    live = True
                if live:
                    by_claim.setdefault(entry.claim_uid, []).append(entry)
        # Every live entry goes in the state, intents too (prepare journals placements, not IDs): reconcile keeps
        # a live claim's placements whether or not its state has a GI ID, and unprepare destroys an intent by placement.
        claims = {
            uid: RecordedClaim(uid, tuple(sorted({e.device for e in entries})), {STATE_KEY: [_state_entry(e) for e in entries]})
            for uid, entries in by_claim.items()
        }  # fmt: skip
        for record in self._sharing.records.all():  # a claim whose sharing is recorded holds its devices
            known = claims.get(record.claimUID)
            devices = tuple(sorted({*record.devices, *(known.devices if known else ())}))
            state = {**(known.state if known else {STATE_KEY: []}), SHARING_KEY: record.claimUID}
            claims[record.claimUID] = RecordedClaim(record.claimUID, devices, state)
        return list(claims.values())

    def reconcile(self, live_states: Sequence[Mapping[str, Any]]) -> None:
        """Adopt the instances live claims list; destroy instances we created that no live claim lists.

        Instances someone else created (an admin, mig-parted) are never destroyed, unlike
        upstream's DestroyUnknownMIGDevices: they stay published as static MIG devices.
        Ours are those this process created, those live claim states list, and (with a state
        dir) those the ownership journal records, which covers an instance whose prepare
        crashed before its claim state was saved. Journal entries of claims that are not live
        are dropped once their instance is gone (an intent without an instance just goes).
        """
        with self._lock:
            live = {str(s[SHARING_KEY]) for s in live_states if s.get(SHARING_KEY)}
            self._sharing.reconcile(live, self._handles)
            if self.settings.partitioning == "dynamic":
                self._reconcile_mig(live_states)

    def _reconcile_mig(self, live_states: Sequence[Mapping[str, Any]]) -> None:
        with self._lock:
            index = self._index()
            recorded = self._journal.all_entries()  # re-read: a rolling-update peer may have written since start
            self._owned |= {entry.key for entry in recorded}
            self._whole_users = {}
            for whole in (s.get(WHOLE_KEY) or {} for s in live_states):
                for uuid in whole.get("gpus") or []:
                    self._whole_users.setdefault(str(uuid), set()).add(str(whole.get("claim")))
            entries = [e for s in live_states for e in (s.get(STATE_KEY) or [])]
            keep = {(str(e.get("parentUUID")), int(e["giId"])) for e in entries if e.get("giId") is not None}
            live_keys = {_entry_key(e) for e in entries}
            ours_before = set(self._owned)
            self._owned |= live_keys
            failed: set[GiKey] = set()
            examined: set[str] = set()
            for gpu in index.by_uuid.values():
                examined.add(gpu.uuid)
                profiles = index.profiles.get(gpu.uuid) or []
                if not profiles or not nvml.mig_mode(gpu.handle)[0]:
                    continue
                for gi, info in mig.live_instances(gpu.handle, profiles):
                    key = (gpu.uuid, info.profile_id, info.placement.start)
                    # A live claim's placement is its instance even where its state has no GI ID yet.
                    if (gpu.uuid, info.id) in keep or key in live_keys or key not in ours_before:
                        continue
                    self._owned.discard(key)
                    try:
                        mig.destroy_gpu_instance_tree(gi, info.profile_id, partial(self._compute_profiles.of, gpu.uuid))
                        log.info("destroyed MIG instance no live claim lists", extra=fields(gpu=gpu.name, gi=info.id))
                    except NvmlError as exc:
                        self._compute_profiles.forget(gpu.uuid)
                        failed.add(key)  # its journal entry stays, so the next start tries again
                        log.warning("cannot destroy unknown MIG instance", extra=fields(gpu=gpu.name, gi=info.id, error=str(exc)))
            self._drop_stale_records(recorded, live_keys | failed, examined)
            self._dynamic_by_gi = {key: name for key, name in self._dynamic_by_gi.items() if key in keep}
            self.discover()  # instances the claims proved ours are offered as placements again

    def _drop_stale_records(self, recorded: Sequence[OwnedInstance], keep: set[GiKey], examined: set[str]) -> None:
        """Forget journal entries no live claim lists on GPUs reconcile looked at (their instance is gone now)."""
        stale: dict[str, set[GiKey]] = {}
        for entry in recorded:
            if entry.key in keep or entry.parent_uuid not in examined:
                continue  # listed, or on a GPU not seen this time: keep it for a later start
            stale.setdefault(entry.claim_uid, set()).add(entry.key)
            self._owned.discard(entry.key)  # an intent never created: the placement must not count as ours
        for claim_uid, keys in stale.items():
            self._journal_remove(claim_uid, *keys)

    # ---- health --------------------------------------------------------------------------

    def watch_health(self, stop: threading.Event) -> Iterator[HealthEvent]:
        index = self._index()
        watcher = HealthWatcher(
            gpus=list(index.by_uuid.values()),
            resolve=self._affected_devices,
            all_devices=lambda: [name for names in index.per_gpu.values() for name in names],
            ignore=ignored_xids(),
            on_xid=self._count_xid,
        )
        return watcher.events(stop)

    def _count_xid(self, gpu_uuid: str) -> None:
        with self._xid_lock:
            self._xids[gpu_uuid] += 1

    # ---- device metrics ----------------------------------------------------------------------

    def sample_devices(self) -> list[DeviceSample]:
        """Readings of every published device. Never takes self._lock (prepare holds it through MIG creation):
        the published index is replaced whole by discovery, so one reference read sees a consistent one."""
        index = self._published
        if index is None:
            return []
        modes, daemons = self._sharing_state(index)
        with self._xid_lock:
            xids = dict(self._xids)
        samples: list[DeviceSample] = []
        for gpu in index.by_uuid.values():
            readings = metrics.read_gpu(gpu)
            readings.errors["xid"] = xids.get(gpu.uuid, 0)
            migs = metrics.mig_instances(gpu) if gpu.mig_enabled else {}
            for name in sorted(set(index.per_gpu.get(gpu.uuid, []))):
                gi_id = self._gi_of(index, gpu, name)
                mig = migs.get(gi_id) if gi_id is not None else None
                samples.append(metrics.sample(name, gpu, readings, mig, partition=gi_id is not None or name in index.placements,
                                              sharing=modes.get(name, "exclusive"), daemons=daemons.get(name, {})))
        return samples

    def _gi_of(self, index: _Published, gpu: GpuInfo, name: str) -> int | None:
        """The GPU instance behind a published partition that exists now; None for the whole GPU or an uncreated placement."""
        if name in index.static_migs:
            return index.static_migs[name][1].gi_id
        if name in index.placements:
            return next((gi for (gpu_uuid, gi), device in list(self._dynamic_by_gi.items()) if device == name and gpu_uuid == gpu.uuid), None)
        return None

    def _sharing_state(self, index: _Published) -> tuple[dict[str, str], dict[str, dict[str, bool]]]:
        """Device name -> sharing mode, and -> {claim UID: MPS control daemon alive}, from the sharing records."""
        modes: dict[str, str] = {}
        daemons: dict[str, dict[str, bool]] = {}
        for record in self._sharing.records.all():
            for gpu_uuid in record.timeSlice:
                for name in index.per_gpu.get(gpu_uuid, []):
                    modes.setdefault(name, "time-slicing")
            if record.mps is None:
                continue
            alive = mps.daemon_alive(record.mps.pid, record.mps.startTime)
            for name in record.devices:
                modes[name] = "mps"
                daemons.setdefault(name, {})[record.claimUID] = alive
        return modes, daemons

    def simulate_load(self, busy: Collection[str]) -> None:
        busy = set(busy)
        if self.simulator is None:
            return
        index = self._published
        if index is None:
            return
        keys: set[str] = set()
        for gpu in index.by_uuid.values():
            held = busy & set(index.per_gpu.get(gpu.uuid, []))
            if not held:
                continue
            keys.add(gpu.uuid)  # a busy partition makes its parent busy
            migs = metrics.mig_instances(gpu) if gpu.mig_enabled else {}
            for name in held:
                gi_id = self._gi_of(index, gpu, name)
                if gi_id is not None and gi_id in migs:
                    keys.add(migs[gi_id].uuid)
        self.simulator.load.set_busy(keys)

    def _affected_devices(self, gpu_uuid: str, gi_id: int | None) -> list[str]:
        index = self._index()
        if gi_id is None:
            return list(index.per_gpu.get(gpu_uuid, []))
        for name, (gpu, mig_device) in index.static_migs.items():
            if gpu.uuid == gpu_uuid and mig_device.gi_id == gi_id:
                return [name]
        dynamic_name = self._dynamic_by_gi.get((gpu_uuid, gi_id))
        return [dynamic_name] if dynamic_name else []


def _prepared_device(name: str, device_edits: ContainerEdits, uuid: str) -> PreparedDevice:
    device_edits.env.append(edits.uuid_env(name, uuid))
    return PreparedDevice(name, device_edits)


def _memory_share(allocated: AllocatedDevice) -> int | None:
    """Bytes of the GPU's memory a consumable-capacity allocation takes (its `consumedCapacity`), or None."""
    if allocated.share_id is None:
        return None
    for key, value in allocated.consumed_capacity:
        if key in ("memory", f"{NvidiaBackend.driver_name}/memory"):
            try:
                return int(quantity.parse(value))
            except (ValueError, TypeError, ArithmeticError):
                raise DeviceError(allocated.device, f"consumedCapacity memory {value!r} is not a quantity") from None
    return None


def _entry_key(entry: StateEntry) -> GiKey:
    return (str(entry.get("parentUUID")), int(entry.get("profileId", -1)), int(entry.get("start", -1)))


def _state_entry(entry: OwnedInstance) -> dict[str, Any]:
    """A journal entry in the claim-state shape `_destroy` takes (no IDs: the intent names the instance by placement)."""
    return {"device": entry.device, "parentUUID": entry.parent_uuid, "giId": None, "ciId": None,
            "profileId": entry.profile_id, "start": entry.start}


def _start_nvml(driver_root: Path = Path("/")) -> None:
    """nvmlInit plus a device count; BackendUnavailable with a plain reason when NVIDIA cannot run here."""
    try:
        nvml.init(driver_root)
    except NvmlError as exc:
        if exc.library_missing:
            raise BackendUnavailable(
                "nvidia",
                f"the NVIDIA driver library (libnvidia-ml.so.1) is not installed or not loadable ({exc.detail}); "
                "install the driver, point --driver-root at the host's driver files, or use --profile to simulate",
            ) from exc
        raise BackendUnavailable("nvidia", f"NVML could not start: {exc}") from exc
    try:
        count = nvml.device_count()
    except NvmlError as exc:
        nvml.shutdown()
        raise BackendUnavailable("nvidia", f"NVML cannot count GPUs: {exc}") from exc
    if count == 0:
        nvml.shutdown()
        raise BackendUnavailable("nvidia", "NVML found no NVIDIA GPUs on this node")


def _shutdown_nvml() -> None:
    try:
        nvml.shutdown()
    except NvmlError as exc:
        log.debug("nvmlShutdown failed", extra=fields(error=str(exc)))


def _stop_simulated_nvml(simulator: fake_nvml.FakeNvmlLibrary) -> None:
    """Shut NVML down and uninstall `simulator`, unless another simulated backend has replaced it since."""
    from dra_driver_nvidia.simulated import fake_nvml

    _shutdown_nvml()
    if fake_nvml.installed() is simulator:
        fake_nvml.install(None)
    simulator.close()


def _write_sysfs(root: Path, section: NvidiaSection) -> None:
    """A minimal sysfs tree so the PCIe root (and NUMA node) are read the same way as on a host."""
    for gpu in section.gpus:
        if not gpu.pcieRoot:
            continue
        bus_id = kubernetes_bus_id(gpu.pciBusId)
        device_dir = root / "devices" / gpu.pcieRoot / bus_id
        device_dir.mkdir(parents=True, exist_ok=True)
        if gpu.numaNode is not None:
            (device_dir / "numa_node").write_text(f"{gpu.numaNode}\n")
        link = root / "bus" / "pci" / "devices" / bus_id
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(Path("../../..") / "devices" / gpu.pcieRoot / bus_id)


def _request_env(devices: Sequence[AllocatedDevice]) -> dict[str, ContainerEdits]:
    """Sharing settings per request (they follow the request's configuration); no device list:
    visibility comes from the device nodes (see dra_driver_nvidia.edits)."""
    by_request: dict[str, list[AllocatedDevice]] = {}
    for allocated in devices:
        by_request.setdefault(allocated.request, []).append(allocated)
    result: dict[str, ContainerEdits] = {}
    for request, members in by_request.items():
        configs = [d.config if isinstance(d.config, (GpuConfig, MigDeviceConfig)) else None for d in members]
        env = edits.sharing_env(configs)
        if env:
            result[request] = ContainerEdits(env=env)
    return result


def _sharing_manager(
    settings: BackendSettings, files: driver_files.DriverFiles | None, driver_root: Path,
    scratch: sim_scratch.ScratchDir | None, simulated: bool,
) -> SharingManager:  # fmt: skip
    """Sharing's records and daemons: under the state dir (boot-scoped tmpfs), else a simulation's scratch dir."""
    base = settings.state_dir / "nvidia" if settings.state_dir is not None else (scratch.path if scratch is not None else None)
    records = SharingRecords(settings.state_dir / "nvidia" / "sharing" if settings.state_dir is not None else None)
    binaries = {PurePosixPath(path).name: driver_root / path.lstrip("/") for path in (files.binaries if files else [])}
    control = None
    if mps.BINARY in binaries:
        env = _daemon_env(None if simulated else files, driver_root)  # the stand-in is this interpreter: no driver libraries
        control = mps.MpsControl(binaries[mps.BINARY], env, private_shm=not simulated)
    return SharingManager(records, base / "mps" if base is not None else None, control, binaries.get("nvidia-smi"),
                          exclusive_compute=settings.mps_exclusive_compute)  # fmt: skip


def _daemon_env(files: driver_files.DriverFiles | None, driver_root: Path) -> dict[str, str]:
    """The daemon's environment: a plain PATH, and the driver root's library folders when it is not / (the
    server it starts loads libcuda from there)."""
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    if files is not None and driver_root != Path("/"):
        folders = dict.fromkeys(str(driver_root / lib.path.lstrip("/")).rsplit("/", 1)[0] for lib in files.libraries)
        if folders:
            env["LD_LIBRARY_PATH"] = ":".join(folders)
    return env
