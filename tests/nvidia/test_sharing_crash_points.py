"""kill -9 at every step of preparing or unpreparing a claim that shares its GPUs: after the restart nothing the
claim changed is left (no control daemon, compute modes and intervals back), and a completed claim's daemon and
settings are never touched.

Modelled on test_mig_crash_points: a step raises an exception nothing in the backend catches (a killed process
runs no rollback), before or after the step took effect. Steps are every process the backend runs (the MPS
control daemon's start, each command sent to it, nvidia-smi), every NVML compute-mode change and every write or
removal of the sharing record. The restarted daemon is a fresh NvidiaBackend over the same GPUs, driver root and
state dir, doing what plugin recovery does: roll the interrupted claim back with no backend state
(`unprepare(claim, {})`), or, when the checkpoint record was lost, rebuild the claim from `recorded_claims`,
`reconcile` with its state, and let the kubelet's unprepare release it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from dra_driver.backend.interface import ClaimRef
from dra_driver_nvidia.backend import SHARING_KEY, NvidiaBackend
from dra_driver.common import atomic_file
from dra_driver_nvidia.claim_files import ClaimFiles

from .conftest import OpenBackend
from .nvml_spy import intercept
from .sharing_helpers import alloc, daemons_under, interval, mps, time_slice
from .test_mig_crash_points import Killed, KillSwitch, kill_points
from .test_sharing import restart

COMPLETED = ClaimRef("ns", "done", "uid-done")
KILLED = ClaimRef("ns", "killed", "uid-killed")
EXCLUSIVE = pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
DEFAULT = pynvml.NVML_COMPUTEMODE_DEFAULT
# The killed claim: MPS with limits on two GPUs, plus an interval on a third (another request of the claim).
KILLED_MPS = alloc("gpu-1", "gpu-2", config=mps(defaultActiveThreadPercentage=50, defaultPinnedDeviceMemoryLimit="8Gi"))
KILLED_SLICED = alloc("gpu-3", config=time_slice("Long"))


def install(switch: KillSwitch, backend: NvidiaBackend, patch: pytest.MonkeyPatch) -> None:
    assert backend.simulator is not None
    intercept(patch, backend.simulator, "nvmlDeviceSetComputeMode", lambda original, *args: switch.step(lambda: original(*args)))
    run = subprocess.run
    patch.setattr(subprocess, "run", lambda *args, **kw: switch.step(lambda: run(*args, **kw)))
    # Every record write: a claim's first, created in place (ClaimFiles.create), or a later one, replaced.
    create, replace = ClaimFiles.create, atomic_file.replace_file
    patch.setattr(ClaimFiles, "create", lambda files, uid, body: switch.step(lambda: create(files, uid, body)))
    patch.setattr(atomic_file, "replace_file", lambda *args, **kw: switch.step(lambda: replace(*args, **kw)))
    remove = ClaimFiles.remove

    def removing(files: ClaimFiles[Any], uid: str) -> bool:
        if files.directory.name == "sharing":  # the sharing records', not the MIG ownership journal's
            return switch.step(lambda: remove(files, uid))
        return remove(files, uid)

    patch.setattr(ClaimFiles, "remove", removing)


@pytest.fixture
def node(open_backend: OpenBackend, tmp_path: Path) -> Iterator[Callable[[], tuple[NvidiaBackend, dict[str, Any]]]]:
    made = 0

    def _node() -> tuple[NvidiaBackend, dict[str, Any]]:
        nonlocal made
        made += 1
        backend = open_backend("dgx-h100", state_dir=tmp_path / f"s{made}")
        completed = backend.prepare(COMPLETED, alloc("gpu-0", config=mps(defaultActiveThreadPercentage=25)))
        return backend, dict(completed.state)

    yield _node


def snapshot(backend: NvidiaBackend) -> tuple[dict[int, str], list[int], list[int | None]]:
    assert backend.simulator is not None and backend.settings.state_dir is not None
    gpus = backend.simulator.gpus
    return (daemons_under(backend.settings.state_dir), [g.compute_mode for g in gpus[:4]],
            [interval(backend, g.spec.uuid) for g in gpus[:4]])  # fmt: skip


def assert_only_the_completed_claim_left(backend: NvidiaBackend, restarted: NvidiaBackend, before: Any, where: str) -> None:
    daemons, modes, intervals = snapshot(backend)
    assert daemons == before[0], where  # the completed claim's daemon, the same process; nothing else
    assert modes == [EXCLUSIVE, DEFAULT, DEFAULT, DEFAULT], where
    assert [i or 0 for i in intervals] == [0, 0, 0, 0], where
    assert [c.claim_uid for c in restarted.recorded_claims()] == [COMPLETED.uid], where


def prepare_killed(backend: NvidiaBackend) -> dict[str, Any]:
    return dict(backend.prepare(KILLED, [*KILLED_MPS, *KILLED_SLICED]).state)


def count_steps(operation: Callable[[NvidiaBackend], Any], node: Callable[[], tuple[NvidiaBackend, dict[str, Any]]],
                monkeypatch: pytest.MonkeyPatch) -> int:  # fmt: skip
    backend, _ = node()
    with monkeypatch.context() as patch:
        switch = KillSwitch()
        install(switch, backend, patch)
        operation(backend)
    return switch.steps


@pytest.mark.parametrize("record_lost", [False, True], ids=["rollback", "record-lost"])
def test_kill_at_every_step_of_a_sharing_prepare(node: Callable[[], tuple[NvidiaBackend, dict[str, Any]]],
                                                 monkeypatch: pytest.MonkeyPatch, record_lost: bool) -> None:  # fmt: skip
    total = count_steps(prepare_killed, node, monkeypatch)
    # records, 2 compute modes, the daemon's start, 3 commands, nvidia-smi
    assert total >= 8
    left_running = 0
    for at, after, where in kill_points(total):
        backend, completed = node()
        before = snapshot(backend)
        with monkeypatch.context() as patch:
            install(KillSwitch(at, after), backend, patch)
            with pytest.raises(Killed):
                prepare_killed(backend)
        left_running += len(snapshot(backend)[0]) > len(before[0])
        restarted = restart(backend)
        if record_lost:
            states = {c.claim_uid: c.state for c in restarted.recorded_claims()}
            restarted.reconcile([completed, *([states[KILLED.uid]] if KILLED.uid in states else [])])
            restarted.unprepare(KILLED, states.get(KILLED.uid, {}))
        else:
            restarted.unprepare(KILLED, {})  # recovery's rollback of PrepareStarted without backend state
            restarted.reconcile([completed])
        assert_only_the_completed_claim_left(backend, restarted, before, where)
        retried = restarted.prepare(KILLED, [*KILLED_MPS, *KILLED_SLICED])  # the kubelet's retry works
        assert retried.state[SHARING_KEY] == KILLED.uid, where
        restarted.unprepare(KILLED, retried.state)
    assert left_running >= 3  # kills after the daemon started: the checks above saw it and made it go


def test_kill_at_every_step_of_a_sharing_unprepare(node: Callable[[], tuple[NvidiaBackend, dict[str, Any]]],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    total = count_steps(lambda b: b.unprepare(KILLED, prepare_killed(b)), node, monkeypatch) - count_steps(prepare_killed, node, monkeypatch)
    assert total >= 4  # quit, compute modes back, nvidia-smi, the record's removal
    for at, after, where in kill_points(total):
        backend, completed = node()
        before = snapshot(backend)
        state = prepare_killed(backend)
        with monkeypatch.context() as patch:
            install(KillSwitch(at, after), backend, patch)
            with pytest.raises(Killed):
                backend.unprepare(KILLED, state)
        restarted = restart(backend)
        restarted.unprepare(KILLED, state)  # recovery finishes an unprepare after UnprepareStarted
        restarted.reconcile([completed])
        assert_only_the_completed_claim_left(backend, restarted, before, where)
