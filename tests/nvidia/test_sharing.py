"""GPU sharing applied on the node: the claim's MPS control daemon (started, given its limits, kept across a
restart, started again when dead, stopped), the compute mode it needs, time-slice intervals (reference-counted
per GPU). The daemon is the stand-in nvidia-cuda-mps-control of the simulated driver root, a real process."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import pynvml
import pytest

from dra_driver.common.errors import DraError
from dra_driver.backend.interface import ClaimRef
from dra_driver_nvidia import nvml
from dra_driver_nvidia.backend import SHARING_KEY, NvidiaBackend
from dra_driver_nvidia.sharing_records import SharingRecords

from tests.support import eventually

from .conftest import OpenBackend
from .nvml_spy import count
from .sharing_helpers import alloc, ask, daemons_under, interval, mps, quirks, time_slice

CLAIM = ClaimRef("ns", "shared", "uid-shared")
OTHER = ClaimRef("ns", "other", "uid-other")
EXCLUSIVE = pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
DEFAULT = pynvml.NVML_COMPUTEMODE_DEFAULT


@pytest.fixture
def node(open_backend: OpenBackend, tmp_path: Path) -> NvidiaBackend:
    return open_backend("dgx-h100", state_dir=tmp_path / "state")


def mps_root(backend: NvidiaBackend) -> Path:
    assert backend.settings.state_dir is not None
    return backend.settings.state_dir / "nvidia" / "mps"


def pipe_of(prepared_mounts: list, root: Path) -> str:
    return next(m.host_path for m in prepared_mounts if m.container_path == "/tmp/nvidia-mps")


def kill_and_wait(pid: int, root: Path) -> None:
    """kill -9 a daemon and wait until it is gone (a process still exiting counts as alive)."""
    os.kill(pid, signal.SIGKILL)
    eventually(lambda: pid not in daemons_under(root), f"daemon {pid} to die", 10, step=0.01)


def restart(backend: NvidiaBackend) -> NvidiaBackend:
    """A fresh backend over the same GPUs, driver root and state dir, as after a daemon restart."""
    return NvidiaBackend(backend.settings, simulator=backend.simulator, sysfs_root=backend._sysfs_root, proc_root=None,
                         files=backend._files, driver_root=backend._scratch.path / "driver-root")  # type: ignore[union-attr]


def test_mps_claim_runs_its_own_daemon_with_its_limits_and_unprepare_restores_everything(node: NvidiaBackend) -> None:
    fake = node.simulator
    assert fake is not None
    gpus = [fake.gpus[0].spec.uuid, fake.gpus[1].spec.uuid]
    config = mps(defaultActiveThreadPercentage=40, defaultPinnedDeviceMemoryLimit="20Gi", defaultPerDevicePinnedMemoryLimit={"1": "10Gi"})
    prepared = node.prepare(CLAIM, alloc("gpu-0", "gpu-1", config=config))

    pipe = pipe_of(prepared.claim_edits.mounts, mps_root(node))
    assert Path(pipe).parent == mps_root(node) / CLAIM.uid
    live = daemons_under(mps_root(node))
    assert list(live.values()) == [pipe]  # one daemon for the claim
    environ = Path(f"/proc/{next(iter(live))}/environ").read_bytes().split(b"\0")
    assert f"CUDA_VISIBLE_DEVICES={','.join(gpus)}".encode() in environ
    assert ask(node, pipe, "get_default_active_thread_percentage").stdout.strip() == "40.0"
    assert ask(node, pipe, f"get_default_device_pinned_mem_limit {gpus[0]}").stdout.strip() == "20G"
    assert ask(node, pipe, f"get_default_device_pinned_mem_limit {gpus[1]}").stdout.strip() == "10G"
    assert [g.compute_mode for g in fake.gpus[:3]] == [EXCLUSIVE, EXCLUSIVE, DEFAULT]
    env = prepared.claim_edits.env
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40" in env and "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M,1=10240M" in env
    assert {m.container_path for m in prepared.claim_edits.mounts} >= {"/tmp/nvidia-mps", "/dev/shm"}
    assert prepared.state[SHARING_KEY] == CLAIM.uid

    node.unprepare(CLAIM, prepared.state)
    assert daemons_under(mps_root(node)) == {}
    assert not (mps_root(node) / CLAIM.uid).exists()
    assert [g.compute_mode for g in fake.gpus[:2]] == [DEFAULT, DEFAULT]
    assert SharingRecords(node.settings.state_dir / "nvidia" / "sharing").all() == []  # type: ignore[operator]


def test_a_gpu_already_in_exclusive_process_mode_is_not_touched(node: NvidiaBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = node.simulator
    assert fake is not None
    fake.gpus[0].compute_mode = EXCLUSIVE
    calls = count(monkeypatch, fake, "nvmlDeviceSetComputeMode")
    prepared = node.prepare(CLAIM, alloc("gpu-0", config=mps()))
    node.unprepare(CLAIM, prepared.state)
    assert calls["nvmlDeviceSetComputeMode"] == 0 and fake.gpus[0].compute_mode == EXCLUSIVE


def test_exclusive_compute_off_leaves_every_compute_mode(open_backend: OpenBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = open_backend("dgx-h100", state_dir=tmp_path, mps_exclusive_compute=False)
    assert backend.simulator is not None
    calls = count(monkeypatch, backend.simulator, "nvmlDeviceSetComputeMode", "nvmlDeviceGetComputeMode")
    prepared = backend.prepare(CLAIM, alloc("gpu-0", config=mps(defaultActiveThreadPercentage=50)))
    assert len(daemons_under(tmp_path)) == 1
    backend.unprepare(CLAIM, prepared.state)
    assert sum(calls.values()) == 0


def test_mps_on_a_dynamic_mig_device_serves_the_mig_uuid_and_leaves_the_parent_mode(open_backend: OpenBackend, tmp_path: Path) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path)
    backend.discover()
    prepared = backend.prepare(CLAIM, alloc("gpu-3-mig-1g10gb-19-0", config=mps(defaultPinnedDeviceMemoryLimit="4Gi")))
    mig_uuid = prepared.state["migInstances"][0]["uuid"]
    (pid, pipe), = daemons_under(tmp_path).items()
    assert f"CUDA_VISIBLE_DEVICES={mig_uuid}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert ask(backend, pipe, f"get_default_device_pinned_mem_limit {mig_uuid}").stdout.strip() == "4G"
    assert backend.simulator is not None and backend.simulator.gpus[3].compute_mode == DEFAULT
    backend.unprepare(CLAIM, prepared.state)
    assert daemons_under(tmp_path) == {} and not any(backend.simulator.gpus[3].instances)


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ([mps(defaultPerDevicePinnedMemoryLimit={"2": "1Gi"})], "key '2' is neither an index 0..0"),
        ([mps(defaultActiveThreadPercentage=10), mps(defaultActiveThreadPercentage=20)], "different mpsConfig"),
    ],
)
def test_a_bad_mps_claim_fails_alone_and_leaves_nothing(node: NvidiaBackend, configs: list, message: str) -> None:
    devices = [d for i, c in enumerate(configs) for d in alloc(f"gpu-{i}", config=c)]
    with pytest.raises(DraError, match=message):
        node.prepare(CLAIM, devices)
    assert daemons_under(mps_root(node)) == {}
    assert node.simulator is not None and node.simulator.gpus[0].compute_mode == DEFAULT
    assert node.recorded_claims() == []
    ok = node.prepare(OTHER, alloc("gpu-5", config=mps()))  # the next claim is unaffected
    node.unprepare(OTHER, ok.state)


def test_a_daemon_that_cannot_start_fails_the_claim_clearly_and_restores_the_mode(node: NvidiaBackend) -> None:
    binary = node._sharing._control.binary  # type: ignore[union-attr]
    original = binary.read_text()
    binary.write_text("#!/bin/sh\necho 'cannot open the GPU' >&2\nexit 3\n")
    try:
        with pytest.raises(DraError, match=r"-d failed \(exit 3\): cannot open the GPU"):
            node.prepare(CLAIM, alloc("gpu-0", config=mps()))
    finally:
        binary.write_text(original)
    assert node.simulator is not None and node.simulator.gpus[0].compute_mode == DEFAULT
    assert node.recorded_claims() == []


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        ({"set_default_device_pinned_mem_limit": "unknown"},
         r"does not know 'set_default_device_pinned_mem_limit GPU-\S+ 20480M': it answered "
         r"'Unknown command \"set_default_device_pinned_mem_limit\"' \(exit status 0\)"),
        ({"set_default_device_pinned_mem_limit": "ignored"},
         r"did not take 'set_default_device_pinned_mem_limit GPU-\S+ 20480M': it answered '', "
         r"and get_default_device_pinned_mem_limit GPU-\S+ answered '', not 20480M"),
        ({"set_default_active_thread_percentage": "unknown"}, r"does not know 'set_default_active_thread_percentage 40'"),
        ({"set_default_active_thread_percentage": "ignored"},
         r"did not take 'set_default_active_thread_percentage 40': it answered '100.0', not the percentage 40"),
    ],
)
def test_a_limit_the_daemon_did_not_take_fails_the_claim_though_the_control_binary_exits_0(
    node: NvidiaBackend, behaviour: dict[str, str], message: str,
) -> None:  # fmt: skip
    # The real nvidia-cuda-mps-control exits 0 for any command, an unknown one included: only its answers tell.
    hook = quirks(node, behaviour)
    try:
        with pytest.raises(DraError, match=message):
            node.prepare(CLAIM, alloc("gpu-0", config=mps(defaultActiveThreadPercentage=40, defaultPinnedDeviceMemoryLimit="20Gi")))
    finally:
        hook.unlink()
    assert daemons_under(mps_root(node)) == {}  # rolled back like any failed prepare
    assert node.simulator is not None and node.simulator.gpus[0].compute_mode == DEFAULT
    assert node.recorded_claims() == []
    ok = node.prepare(CLAIM, alloc("gpu-0", config=mps(defaultActiveThreadPercentage=40, defaultPinnedDeviceMemoryLimit="20Gi")))
    node.unprepare(CLAIM, ok.state)


def test_a_limit_that_is_no_whole_number_of_gib_is_taken_as_the_daemon_shows_it(node: NvidiaBackend) -> None:
    """A fractional share (40779Mi): the 580 daemon shows it truncated (39G), which is the limit taken, not a failure."""
    prepared = node.prepare(CLAIM, alloc("gpu-0", config=mps(defaultPinnedDeviceMemoryLimit="40779Mi")))
    try:
        assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40779M" in prepared.claim_edits.env
    finally:
        node.unprepare(CLAIM, prepared.state)


def test_restart_keeps_a_live_daemon_and_starts_a_dead_one_again_with_its_limits(node: NvidiaBackend) -> None:
    first = node.prepare(CLAIM, alloc("gpu-0", config=mps(defaultActiveThreadPercentage=30)))
    second = node.prepare(OTHER, alloc("gpu-1", config=mps(defaultActiveThreadPercentage=60)))
    before = daemons_under(mps_root(node))
    by_pipe = {pipe: pid for pid, pipe in before.items()}
    dead_pipe = pipe_of(second.claim_edits.mounts, mps_root(node))
    kill_and_wait(by_pipe[dead_pipe], mps_root(node))

    restarted = restart(node)
    restarted.reconcile([first.state, second.state])
    after = {pipe: pid for pid, pipe in daemons_under(mps_root(node)).items()}
    kept_pipe = pipe_of(first.claim_edits.mounts, mps_root(node))
    assert after[kept_pipe] == by_pipe[kept_pipe]  # the same process: its clients keep working
    assert after[dead_pipe] != by_pipe[dead_pipe]
    assert ask(node, dead_pipe, "get_default_active_thread_percentage").stdout.strip() == "60.0"
    for claim, prepared in ((CLAIM, first), (OTHER, second)):
        restarted.unprepare(claim, prepared.state)
    assert daemons_under(mps_root(node)) == {}


def test_a_dead_daemon_that_cannot_start_again_is_reported_and_keeps_its_claim(node: NvidiaBackend, caplog: pytest.LogCaptureFixture) -> None:
    prepared = node.prepare(CLAIM, alloc("gpu-0", config=mps()))
    (pid, _), = daemons_under(mps_root(node)).items()
    kill_and_wait(pid, mps_root(node))
    binary = node._sharing._control.binary  # type: ignore[union-attr]
    original = binary.read_text()
    binary.write_text("#!/bin/sh\nexit 1\n")
    sharing_log = logging.getLogger("dra_driver_nvidia.sharing")
    sharing_log.addHandler(caplog.handler)  # directly: a CLI test earlier in the run may have stopped propagation
    try:
        restarted = restart(node)
        restarted.reconcile([prepared.state])
    finally:
        binary.write_text(original)
        sharing_log.removeHandler(caplog.handler)
    assert any("cannot be started again" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)
    assert [c.claim_uid for c in restarted.recorded_claims()] == [CLAIM.uid]  # still reserved
    assert node.simulator is not None and node.simulator.gpus[0].compute_mode == EXCLUSIVE  # still the claim's
    restarted.unprepare(CLAIM, prepared.state)
    assert node.simulator.gpus[0].compute_mode == DEFAULT


def test_a_dead_daemon_started_again_without_its_limits_is_stopped_and_keeps_its_claim(
    node: NvidiaBackend, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    prepared = node.prepare(CLAIM, alloc("gpu-0", config=mps(defaultActiveThreadPercentage=30)))
    (pid, _), = daemons_under(mps_root(node)).items()
    kill_and_wait(pid, mps_root(node))
    hook = quirks(node, {"set_default_active_thread_percentage": "ignored"})  # starts, but the limit does not take
    sharing_log = logging.getLogger("dra_driver_nvidia.sharing")
    sharing_log.addHandler(caplog.handler)
    try:
        restarted = restart(node)
        restarted.reconcile([prepared.state])
    finally:
        hook.unlink()
        sharing_log.removeHandler(caplog.handler)
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert any("cannot be started again with its limits" in message for message in errors), errors
    assert daemons_under(mps_root(node)) == {}  # no server that would let clients past their limits
    assert [c.claim_uid for c in restarted.recorded_claims()] == [CLAIM.uid]  # still reserved
    restarted.unprepare(CLAIM, prepared.state)
    assert node.simulator is not None and node.simulator.gpus[0].compute_mode == DEFAULT


def test_reconcile_undoes_the_sharing_of_a_claim_no_longer_prepared(node: NvidiaBackend) -> None:
    node.prepare(CLAIM, alloc("gpu-0", config=mps()))
    node.prepare(OTHER, alloc("gpu-1", config=time_slice("Long")))
    restarted = restart(node)
    restarted.reconcile([])  # neither claim is live: both were unprepared while the daemon was down
    assert daemons_under(mps_root(node)) == {}
    fake = node.simulator
    assert fake is not None and fake.gpus[0].compute_mode == DEFAULT
    assert interval(node, fake.gpus[1].spec.uuid) == 0
    assert restarted.recorded_claims() == []


def test_a_lost_checkpoint_record_is_rebuilt_from_the_sharing_record(node: NvidiaBackend) -> None:
    node.prepare(CLAIM, alloc("gpu-0", "gpu-2", config=mps()))
    recorded = restart(node).recorded_claims()
    assert [(c.claim_uid, c.devices, c.state[SHARING_KEY]) for c in recorded] == [(CLAIM.uid, ("gpu-0", "gpu-2"), CLAIM.uid)]


# ---- time slicing -------------------------------------------------------------------------


def test_time_slice_interval_is_set_at_prepare_and_restored_at_unprepare(node: NvidiaBackend) -> None:
    fake = node.simulator
    assert fake is not None
    uuid = fake.gpus[0].spec.uuid
    prepared = node.prepare(CLAIM, alloc("gpu-0", config=time_slice("Medium")))
    assert interval(node, uuid) == 2
    assert prepared.state[SHARING_KEY] == CLAIM.uid
    node.unprepare(CLAIM, prepared.state)
    assert interval(node, uuid) == 0


def test_default_interval_changes_nothing(node: NvidiaBackend) -> None:
    prepared = node.prepare(CLAIM, alloc("gpu-0", config=time_slice("Default")))
    assert node.simulator is not None and interval(node, node.simulator.gpus[0].spec.uuid) is None
    assert SHARING_KEY not in prepared.state


def test_the_interval_stays_until_the_last_claim_sharing_the_gpu_is_unprepared(node: NvidiaBackend) -> None:
    assert node.simulator is not None
    uuid = node.simulator.gpus[0].spec.uuid
    first = node.prepare(CLAIM, alloc("gpu-0", config=time_slice("Long"), share_id="a1b2c3d4"))
    second = node.prepare(OTHER, alloc("gpu-0", config=time_slice("Long"), share_id="e5f6a7b8"))
    node.unprepare(CLAIM, first.state)
    assert interval(node, uuid) == 3  # the other claim still runs on it
    node.unprepare(OTHER, second.state)
    assert interval(node, uuid) == 0


def test_a_second_claim_asking_another_interval_of_a_shared_gpu_is_refused(node: NvidiaBackend) -> None:
    first = node.prepare(CLAIM, alloc("gpu-0", config=time_slice("Long"), share_id="a1b2c3d4"))
    with pytest.raises(DraError, match=f"claim {CLAIM.uid} runs this GPU with time-slice interval Long"):
        node.prepare(OTHER, alloc("gpu-0", config=time_slice("Short"), share_id="e5f6a7b8"))
    assert node.simulator is not None and interval(node, node.simulator.gpus[0].spec.uuid) == 3
    node.unprepare(CLAIM, first.state)


def test_an_interval_on_a_mig_device_is_refused_with_the_fix(open_backend: OpenBackend) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic")
    backend.discover()
    with pytest.raises(DraError, match="applies to whole GPUs"):
        backend.prepare(CLAIM, alloc("gpu-3-mig-1g10gb-19-0", config=time_slice("Long")))
    assert backend.simulator is not None and not any(backend.simulator.gpus[3].instances)  # the MIG device was rolled back


def test_compute_mode_wrappers_read_what_they_set(node: NvidiaBackend) -> None:
    handle = nvml.handle_by_index(4)
    nvml.set_compute_mode(handle, nvml.COMPUTE_MODE_EXCLUSIVE_PROCESS)
    assert nvml.compute_mode(handle) == EXCLUSIVE
    nvml.set_compute_mode(handle, nvml.COMPUTE_MODE_DEFAULT)
    assert nvml.compute_mode(handle) == DEFAULT
