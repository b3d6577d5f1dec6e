"""GPU sharing that is applied, not only described: MPS control daemons and time-slice intervals.

MPS (`sharing.strategy: MPS`): one control daemon per claim, serving the claim's MPS devices (GPUs or MIG
devices, by UUID), started from the host driver root with a directory of its own
(`<root>/<claim>/{pipe,log,shm}`). A whole GPU the claim holds alone is first switched to the
EXCLUSIVE_PROCESS compute mode through NVML, as NVIDIA's driver does, so that only the MPS server opens it;
a GPU already in that mode is left as it is, and `exclusive_compute=False` never touches the mode. The
`mpsConfig` limits are sent to the daemon (`set_default_active_thread_percentage`,
`set_default_device_pinned_mem_limit <uuid> <MiB>M`), which makes them the server's limits: a client may
ask for less through its environment, never for more. Each is checked in the daemon's answers (mps.py); one
that did not take fails the claim, which is then rolled back. The containers get the pipe directory at
/tmp/nvidia-mps and the daemon's shm directory at /dev/shm, and the same limits in their environment.

Time slicing (`timeSlicingConfig.interval` other than Default): `nvidia-smi compute-policy -i <uuid>
--set-timeslice=<0..3>` from the driver root, as NVIDIA's driver runs it; the GPU goes back to Default (0)
when the last claim that set an interval on it is unprepared. Claims asking one GPU for two different
intervals are refused (the second names the first's).

Every change is written to the claim's sharing record before it is made (sharing_records.py), so
unprepare, a rollback without backend state and a restart's reconcile undo exactly what was done. A
restart keeps a live claim's daemon (same PID and start time); a daemon found dead is started again with
its limits; one that cannot be is logged as an error naming the claim, whose devices stay reserved.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dra_driver.common.errors import DeviceError, DraError
from dra_driver.common.logs import fields
from dra_driver.model import quantity
from dra_driver.backend.interface import ContainerEdits, Mount
from dra_driver_nvidia import nvml
from dra_driver_nvidia.config import TIMESLICE_VALUES, MpsConfig, Sharing
from dra_driver_nvidia.mps import SET_PINNED, SET_THREADS, DaemonDir, DaemonProcess, MpsControl, MpsError
from dra_driver_nvidia.nvml import NvmlError
from dra_driver.common.node_file import claim_file_stem
from dra_driver_nvidia.sharing_records import MpsRecord, SharingRecord, SharingRecords

log = logging.getLogger(__name__)

CONTAINER_PIPE_DIRECTORY = "/tmp/nvidia-mps"
CONTAINER_SHM = "/dev/shm"
SMI_TIMEOUT_S = 30.0
_READ_WRITE = ("rw", "nosuid", "nodev", "bind")


@dataclass(frozen=True)
class SharedDevice:
    """One allocated device of a claim, as sharing sees it."""

    name: str  # device name in the pool
    uuid: str  # what CUDA_VISIBLE_DEVICES names: the GPU's or the MIG device's UUID
    gpu_uuid: str  # the physical GPU
    handle: nvml.Handle  # the physical GPU's NVML handle
    whole: bool  # the device is the whole GPU (compute mode and time slice are per GPU)
    exclusive: bool  # allocated to this claim alone (no consumable-capacity share)
    sharing: Sharing | None
    memory_bytes: int = 0  # the device's memory
    memory_share: int | None = None  # bytes of it this claim consumes (consumable capacity), enforced through MPS

    @property
    def uses_mps(self) -> bool:
        return (self.sharing is not None and self.sharing.strategy == "MPS") or self.memory_share is not None


class SharingManager:
    def __init__(
        self, records: SharingRecords, mps_root: Path | None, control: MpsControl | None,
        nvidia_smi: Path | None, exclusive_compute: bool = True,
    ) -> None:  # fmt: skip
        self.records = records
        self._mps_root = mps_root
        self._control = control
        self._smi = nvidia_smi
        self._exclusive_compute = exclusive_compute

    # ---- prepare ------------------------------------------------------------------------

    def prepare(self, claim_uid: str, devices: Sequence[SharedDevice]) -> ContainerEdits | None:
        """Apply the claim's sharing: the claim-level edits MPS clients need, None when the claim changes nothing.
        Raises DraError; the caller undoes (`unprepare`)."""
        mps_devices = [d for d in devices if d.uses_mps]
        sliced = self._intervals(claim_uid, devices)
        if not mps_devices and not sliced:
            return None
        if self.records.get(claim_uid) is not None:
            self.unprepare(claim_uid)  # a leftover of an earlier attempt: start from nothing
        record = self.records.new(claim_uid, sorted({d.name for d in devices}))
        self._put(record)
        for gpu_uuid, interval in sliced.items():
            record.timeSlice[gpu_uuid] = interval
            self._put(record)  # before the change: a crash from here on is restored by unprepare
            self._set_timeslice(gpu_uuid, interval)
        if not mps_devices:
            return ContainerEdits()
        return self._start_mps(record, mps_devices)

    def _intervals(self, claim_uid: str, devices: Sequence[SharedDevice]) -> dict[str, int]:
        """GPU uuid -> interval asked for (Default asks for nothing); refused on MIG devices and against another claim's."""
        wanted: dict[str, int] = {}
        for device in devices:
            sharing = device.sharing
            if sharing is None or sharing.strategy != "TimeSlicing" or sharing.timeSlicingConfig is None:
                continue
            interval = TIMESLICE_VALUES[sharing.timeSlicingConfig.interval]
            if interval == 0:
                continue
            if not device.whole:
                raise DeviceError(device.name, "timeSlicingConfig.interval applies to whole GPUs; a MIG device is not "
                                               "time-sliced with other work: remove the interval or use strategy MPS")
            wanted[device.gpu_uuid] = interval
        if not wanted:
            return wanted
        if self._smi is None:
            raise DeviceError(devices[0].name, "time-slice intervals are set with nvidia-smi, which is not under the "
                                               "driver root (check --driver-root)")
        for other in self.records.all():
            if other.claimUID == claim_uid:
                continue
            for gpu_uuid, interval in other.timeSlice.items():
                if wanted.get(gpu_uuid, interval) != interval:
                    names = {v: k for k, v in TIMESLICE_VALUES.items()}
                    raise DeviceError(gpu_uuid, f"claim {other.claimUID} runs this GPU with time-slice interval "
                                                f"{names[interval]}; use the same interval or none")
        return wanted

    def _start_mps(self, record: SharingRecord, devices: Sequence[SharedDevice]) -> ContainerEdits:
        config = _one_mps_config([d for d in devices if d.sharing is not None and d.sharing.strategy == "MPS"] or devices[:1])
        if self._control is None or self._mps_root is None:
            raise DeviceError(devices[0].name, "MPS needs nvidia-cuda-mps-control under the driver root and a state "
                                               "directory for its daemon (--state-dir); check --driver-root")
        uuids = list(dict.fromkeys(d.uuid for d in devices))
        limits = _with_shares(_limits(config, uuids, devices[0].name), devices)
        where = DaemonDir(self._mps_root / claim_file_stem(record.claimUID))
        record.mps = MpsRecord(directory=str(where.root), gpus=uuids, commands=_commands(limits))
        self._put(record)
        for device in devices:
            if self._exclusive_compute and device.whole and device.exclusive:
                self._exclusive_process(record, device)
        process = self._control.start(where, uuids)
        record.mps.pid, record.mps.startTime = process.pid, process.start_time
        self._put(record)
        log.info("started MPS control daemon", extra=fields(claim=record.claimUID, pid=process.pid, gpus=uuids))
        for command in record.mps.commands:
            self._control.apply(where, command)
        return _client_edits(where, limits)

    def _exclusive_process(self, record: SharingRecord, device: SharedDevice) -> None:
        assert record.mps is not None
        try:
            current = nvml.compute_mode(device.handle)
            if current == nvml.COMPUTE_MODE_EXCLUSIVE_PROCESS:
                return  # already right (set by an admin, or by nothing else of ours): nothing to restore either
            record.mps.computeModes[device.gpu_uuid] = current
            self._put(record)
            nvml.set_compute_mode(device.handle, nvml.COMPUTE_MODE_EXCLUSIVE_PROCESS)
        except NvmlError as exc:
            raise DeviceError(device.name, f"cannot set the EXCLUSIVE_PROCESS compute mode MPS needs: {exc}") from exc
        log.info("set compute mode EXCLUSIVE_PROCESS for MPS", extra=fields(claim=record.claimUID, gpu=device.gpu_uuid, was=current))

    # ---- unprepare ----------------------------------------------------------------------

    def unprepare(self, claim_uid: str, handles: Callable[[], Mapping[str, nvml.Handle]] = dict) -> None:
        """Stop the claim's daemon, restore compute modes and intervals, then drop the record. Raises DraError."""
        record = self.records.get(claim_uid)
        if record is None:
            return
        if record.mps is not None:
            where = DaemonDir(Path(record.mps.directory))
            if self._control is None:
                raise DeviceError(claim_uid, "its MPS control daemon cannot be stopped: nvidia-cuda-mps-control is not under the driver root")
            self._control.stop(where, _process(record.mps))
            for gpu_uuid, mode in record.mps.computeModes.items():
                self._restore_compute_mode(gpu_uuid, mode, handles().get(gpu_uuid))
            _remove_tree(where.root)
        others = [r for r in self.records.all() if r.claimUID != claim_uid]
        for gpu_uuid in record.timeSlice:
            if any(gpu_uuid in other.timeSlice for other in others):
                continue  # another claim still runs this GPU with the interval
            self._set_timeslice(gpu_uuid, 0)
        self.records.remove(claim_uid)
        log.info("sharing undone", extra=fields(claim=claim_uid))

    def _restore_compute_mode(self, gpu_uuid: str, mode: int, handle: nvml.Handle | None) -> None:
        if handle is None:
            log.warning("compute mode of a GPU not seen now left as it is", extra=fields(gpu=gpu_uuid, restore_to=mode))
            return
        try:
            nvml.set_compute_mode(handle, mode)
        except NvmlError as exc:
            raise DeviceError(gpu_uuid, f"cannot restore compute mode {mode}: {exc}") from exc

    # ---- restart ------------------------------------------------------------------------

    def reconcile(self, live_claims: set[str], handles: Callable[[], Mapping[str, nvml.Handle]]) -> None:
        """Keep live claims' daemons (start a dead one again); undo what records of other claims hold."""
        for record in self.records.all():
            if record.claimUID not in live_claims:
                try:
                    self.unprepare(record.claimUID, handles)
                except DraError as exc:
                    log.error("cannot undo the sharing of a claim that is not prepared; its record stays for the next start",
                              extra=fields(claim=record.claimUID, error=str(exc)))
                continue
            if record.mps is not None and record.mps.pid is not None:
                self._keep_daemon(record)

    def _keep_daemon(self, record: SharingRecord) -> None:
        assert record.mps is not None and self._control is not None
        where = DaemonDir(Path(record.mps.directory))
        if self._control.running(where, _process(record.mps)) is not None:
            log.info("MPS control daemon of a prepared claim kept", extra=fields(claim=record.claimUID, pid=record.mps.pid))
            return
        try:
            process = self._control.start(where, record.mps.gpus)
            record.mps.pid, record.mps.startTime = process.pid, process.start_time
            self._put(record)
            for command in record.mps.commands:
                self._control.apply(where, command)
        except DraError as exc:
            self._stop_unlimited(where)
            log.error("the MPS control daemon of a prepared claim died and cannot be started again with its limits: its "
                      "containers run without MPS; delete the pods using the claim so it is prepared afresh",
                      extra=fields(claim=record.claimUID, directory=str(where.root), error=str(exc)))  # fmt: skip
            return
        log.warning("the MPS control daemon of a prepared claim had died; started again with its limits "
                    "(processes that used the old one must be restarted)", extra=fields(claim=record.claimUID, pid=process.pid))  # fmt: skip

    def _stop_unlimited(self, where: DaemonDir) -> None:
        """A daemon started again whose limits did not all take must not serve: its clients could exceed them."""
        assert self._control is not None
        try:
            self._control.stop(where, None)
        except MpsError as exc:
            log.error("an MPS control daemon without its limits does not stop", extra=fields(directory=str(where.root), error=str(exc)))

    def stop_all(self) -> None:
        """Stop every daemon under the MPS root (a simulated node closing: simulation leaves nothing running)."""
        if self._control is None or self._mps_root is None or not self._mps_root.is_dir():
            return
        for directory in sorted(self._mps_root.iterdir()):
            try:
                self._control.stop(DaemonDir(directory), None)
            except MpsError as exc:
                log.warning("simulated MPS control daemon did not stop", extra=fields(directory=str(directory), error=str(exc)))

    # ---- helpers ------------------------------------------------------------------------

    def _put(self, record: SharingRecord) -> None:
        try:
            self.records.put(record)
        except OSError as exc:
            # Acting unrecorded could leak a daemon or a GPU setting after a crash: refuse.
            raise DeviceError(record.devices[0] if record.devices else record.claimUID,
                              f"cannot record the claim's sharing in {self.records.directory}: {exc}") from exc  # fmt: skip

    def _set_timeslice(self, gpu_uuid: str, interval: int) -> None:
        assert self._smi is not None
        command = [str(self._smi), "compute-policy", "-i", gpu_uuid, f"--set-timeslice={interval}"]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DeviceError(gpu_uuid, f"cannot run {' '.join(command)}: {exc}") from exc
        if result.returncode != 0:
            detail = " ".join((result.stderr + " " + result.stdout).split())[:300]
            raise DeviceError(gpu_uuid, f"{' '.join(command)} failed (exit {result.returncode}): {detail}")
        log.info("set time-slice interval", extra=fields(gpu=gpu_uuid, interval=interval))


def _one_mps_config(devices: Sequence[SharedDevice]) -> MpsConfig:
    """The claim's one MPS configuration (one daemon per claim): the devices' configs must agree."""
    configs = [(d.sharing.mpsConfig if d.sharing is not None else None) or MpsConfig() for d in devices]
    if any(config != configs[0] for config in configs):
        raise DeviceError(devices[0].name, "the claim's MPS devices have different mpsConfig settings; one MPS control "
                                           "daemon serves a claim: give its requests the same mpsConfig, or use two claims")
    return configs[0]


@dataclass(frozen=True)
class _Limits:
    thread_percentage: int | None
    pinned_mib: dict[str, int]  # device UUID -> MiB, in the daemon's device order


def _limits(config: MpsConfig, uuids: list[str], device: str) -> _Limits:
    pinned: dict[str, int] = {}
    if config.defaultPinnedDeviceMemoryLimit is not None:
        default = _mib(config.defaultPinnedDeviceMemoryLimit)
        pinned = dict.fromkeys(uuids, default)
    for key, value in (config.defaultPerDevicePinnedMemoryLimit or {}).items():
        if key in uuids:
            target = key
        elif key.isdigit() and int(key) < len(uuids):
            target = uuids[int(key)]
        else:
            raise DeviceError(device, f"mpsConfig.defaultPerDevicePinnedMemoryLimit key {key!r} is neither an index "
                                      f"0..{len(uuids) - 1} nor the UUID of an MPS device of this claim ({', '.join(uuids)})")
        pinned[target] = _mib(value)
    ordered = {uuid: pinned[uuid] for uuid in uuids if uuid in pinned}
    return _Limits(config.defaultActiveThreadPercentage, ordered)


def _with_shares(limits: _Limits, devices: Sequence[SharedDevice]) -> _Limits:
    """A consumable-capacity share caps its device's pinned memory at the share, and the daemon's thread
    percentage at the largest share's fraction of its GPU (the server's limits: its clients cannot exceed them)."""
    shared = [d for d in devices if d.memory_share is not None and d.memory_bytes > 0]
    if not shared:
        return limits
    pinned = dict(limits.pinned_mib)
    for device in shared:
        assert device.memory_share is not None
        share_mib = device.memory_share >> 20
        pinned[device.uuid] = min(pinned.get(device.uuid, share_mib), share_mib)
    fraction = max(-(-100 * d.memory_share // d.memory_bytes) for d in shared if d.memory_share is not None)  # ceiling
    threads = min(limits.thread_percentage if limits.thread_percentage is not None else 100, max(1, fraction))
    ordered = {d.uuid: pinned[d.uuid] for d in devices if d.uuid in pinned}
    return _Limits(threads, ordered)


def _mib(value: str) -> int:
    return int(quantity.parse(value)) >> 20


def _commands(limits: _Limits) -> list[str]:
    """The control commands that make the limits the server's own (clients cannot raise them)."""
    commands = []
    if limits.thread_percentage is not None:
        commands.append(f"{SET_THREADS} {limits.thread_percentage}")
    commands += [f"{SET_PINNED} {uuid} {mib}M" for uuid, mib in limits.pinned_mib.items()]
    return commands


def _client_edits(where: DaemonDir, limits: _Limits) -> ContainerEdits:
    env = [f"CUDA_MPS_PIPE_DIRECTORY={CONTAINER_PIPE_DIRECTORY}"]
    if limits.thread_percentage is not None:
        env.append(f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={limits.thread_percentage}")
    if limits.pinned_mib:
        # Client ordinals are the server's device order (the daemon's CUDA_VISIBLE_DEVICES).
        env.append("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=" + ",".join(f"{i}={mib}M" for i, mib in enumerate(limits.pinned_mib.values())))
    mounts = [
        Mount(host_path=str(where.pipe), container_path=CONTAINER_PIPE_DIRECTORY, options=_READ_WRITE),
        Mount(host_path=str(where.shm), container_path=CONTAINER_SHM, options=_READ_WRITE),
    ]
    return ContainerEdits(env=env, mounts=mounts)


def _process(record: MpsRecord) -> DaemonProcess | None:
    if record.pid is None or record.startTime is None:
        return None
    return DaemonProcess(record.pid, record.startTime)


def _remove_tree(root: Path) -> None:
    """The daemon's directory, once it has stopped (its sockets and logs go with it)."""
    shutil.rmtree(root, ignore_errors=True)


__all__ = ["MpsError", "SharedDevice", "SharingManager"]
