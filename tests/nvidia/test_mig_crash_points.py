"""kill -9 at every step of a dynamic MIG prepare or unprepare: every instance that exists has a recorded owner
or is reconciled away, and a completed claim's instances are never touched.

The kill is modelled in process: the step raises an exception nothing in the backend catches (as a killed
process runs no rollback), before or after the step took effect. Steps are every NVML call that changes
the GPUs (MIG mode, GPU and compute instances) and every write of the ownership journal. The restarted
daemon is a fresh NvidiaBackend opened from the profile with the same state dir: a new simulated library
that finds the MIG modes and instances the killed one left in the node's simulated-hardware state (as a
real GPU keeps them), doing what plugin recovery does: roll the half-prepared claim back with no recorded state (`unprepare(claim, {})`), then
`reconcile` with the live claims' states. A second variant loses the claim's checkpoint record too:
start-up then rebuilds the claim from `recorded_claims` (reserved), `reconcile` gets that state too,
and the kubelet's unprepare releases it. Either way the completed claim keeps its instances (same GI IDs), an admin's
instance is untouched, and nothing else is left, in the journal or on the GPUs. An unprepare killed
at any step is finished by the restart (`unprepare` with the recorded state, as recovery does after
`UnprepareStarted`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dra_driver.backend.interface import AllocatedDevice, ClaimRef
from dra_driver_nvidia import mig, nvml
from dra_driver_nvidia.backend import NvidiaBackend
from dra_driver_nvidia.simulated.fake_nvml import FakeNvmlLibrary
from dra_driver.common import atomic_file
from dra_driver_nvidia.claim_files import ClaimFiles
from dra_driver_nvidia.ownership import SUBDIR, OwnershipJournal

from .conftest import OpenBackend
from .nvml_spy import intercept

CHANGING_SYMBOLS = (
    "nvmlDeviceSetMigMode",
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlGpuInstanceDestroy",
    "nvmlComputeInstanceDestroy",
)
COMPLETED = ClaimRef("ns", "done", "uid-done")
KILLED = ClaimRef("ns", "killed", "uid-killed")
# dgx-h100 (all GPUs start with MIG off): GPU 0 holds the completed claim and the admin's instance, so the
# killed claim's first two placements need no MIG switch; its third is on GPU 2, which must switch MIG on.
COMPLETED_DEVICES = ("gpu-0-mig-1g10gb-19-0",)
KILLED_DEVICES = ("gpu-0-mig-1g10gb-19-1", "gpu-0-mig-2g20gb-14-2", "gpu-2-mig-1g10gb-19-0")
ADMIN = (0, 19, 6)  # GPU index, GI profile, placement start


class Killed(BaseException):
    """kill -9: not an Exception, so no `except` of the backend runs its rollback."""


@dataclass
class KillSwitch:
    """Counts the steps of a prepare and raises Killed at one of them, before or after it takes effect."""

    at: int = -1
    after: bool = False
    steps: int = 0

    def step(self, run: Callable[[], Any]) -> Any:
        here, self.steps = self.steps, self.steps + 1
        if here == self.at and not self.after:
            raise Killed
        result = run()
        if here == self.at:
            raise Killed
        return result


def install(switch: KillSwitch, fake: FakeNvmlLibrary, monkeypatch: pytest.MonkeyPatch) -> None:
    for symbol in CHANGING_SYMBOLS:
        intercept(monkeypatch, fake, symbol, lambda original, *args: switch.step(lambda: original(*args)))
    # Every record write: a claim's first, created in place (ClaimFiles.create), or a later one, replaced.
    create, replace = ClaimFiles.create, atomic_file.replace_file
    monkeypatch.setattr(ClaimFiles, "create", lambda files, uid, body: switch.step(lambda: create(files, uid, body)))
    monkeypatch.setattr(atomic_file, "replace_file", lambda *args, **kw: switch.step(lambda: replace(*args, **kw)))
    remove = ClaimFiles.remove  # the journal's other change: a claim's file removed with its last entry

    def removing(files: ClaimFiles[Any], uid: str) -> bool:
        if files.directory.name == SUBDIR.name:  # the journal's, not the sharing records'
            return switch.step(lambda: remove(files, uid))
        return remove(files, uid)

    monkeypatch.setattr(ClaimFiles, "remove", removing)


def alloc(devices: tuple[str, ...]) -> list[AllocatedDevice]:
    return [AllocatedDevice(request="gpu", pool="node-a", device=device, config=None) for device in devices]


def admin_create(gpu: int, profile_id: int, start: int) -> tuple[str, int, int]:
    """An instance made behind the driver's back (nvidia-smi mig -cgi -C), straight on the library."""
    handle = nvml.handle_by_index(gpu)
    if not nvml.mig_mode(handle)[0]:
        nvml.set_mig_mode(handle, True)
    profile = next(p for p in mig.read_profiles(handle) if p.info.id == profile_id)
    mig.create_instance(handle, profile, next(p for p in profile.placements if p.start == start))
    return nvml.uuid(handle), profile_id, start


def live(fake: FakeNvmlLibrary) -> set[tuple[str, int, int, frozenset[int]]]:
    """(GPU uuid, GI id, placement start, compute instance IDs) of every GPU instance now."""
    return {(gpu.spec.uuid, gi.id, gi.start, frozenset(gi.computes)) for gpu in fake.gpus for gi in gpu.instances.values()}


def keys(fake: FakeNvmlLibrary) -> set[tuple[str, int, int]]:
    """(GPU uuid, GI profile, placement start) of every GPU instance now."""
    found = set()
    for gpu in fake.gpus:
        for gi in gpu.instances.values():
            found.add((gpu.spec.uuid, gi.profile.id, gi.start))
    return found


def key_of(fake: FakeNvmlLibrary, device: str) -> tuple[str, int, int]:
    """(GPU uuid, GI profile, placement start) a placement's device name stands for: gpu-<i>-mig-<profile>-<id>-<start>."""
    parts = device.split("-")
    return fake.gpus[int(parts[1])].spec.uuid, int(parts[-2]), int(parts[-1])


@dataclass
class Node:
    backend: NvidiaBackend
    fake: FakeNvmlLibrary
    completed_state: dict[str, Any]
    admin: tuple[str, int, int]  # (GPU uuid, GI profile, placement start)
    state_dir: Path
    reopen: Callable[[], NvidiaBackend]  # the restarted daemon's backend: from the profile, same state dir


@pytest.fixture
def node(open_backend: OpenBackend, tmp_path: Path) -> Iterator[Callable[[], Node]]:
    made = 0

    def _node() -> Node:
        nonlocal made
        made += 1
        state_dir = tmp_path / f"state-{made}"
        backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=state_dir)
        fake = backend.simulator
        assert fake is not None
        backend.discover()
        completed = backend.prepare(COMPLETED, alloc(COMPLETED_DEVICES)).state
        admin = admin_create(*ADMIN)
        backend.discover()  # the admin's instance is now known as foreign, as a periodic discovery would find it
        reopen = lambda: open_backend("dgx-h100", partitioning="dynamic", state_dir=state_dir)  # noqa: E731
        return Node(backend, fake, dict(completed), admin, state_dir, reopen)

    yield _node


def steps_of(operation: Callable[[Node], Any], node: Callable[[], Node], monkeypatch: pytest.MonkeyPatch) -> int:
    with monkeypatch.context() as patch:
        first = node()
        switch = KillSwitch()
        install(switch, first.fake, patch)
        operation(first)
    return switch.steps


def kill_points(total: int) -> Iterator[tuple[int, bool, str]]:
    for at in range(total):
        for after in (False, True):
            yield at, after, f"kill {'after' if after else 'before'} step {at} of {total}"


def restart(n: Node) -> NvidiaBackend:
    """The backend the restarted daemon builds: fresh memory and a fresh simulated library over the node's saved
    GPU state, the same state dir. `n.fake` is the new library from here on."""
    killed = live(n.fake), [(gpu.mig_mode, gpu.mig_pending) for gpu in n.fake.gpus]
    restarted = n.reopen()
    assert restarted.simulator is not None and restarted.simulator is not n.fake
    n.backend, n.fake = restarted, restarted.simulator
    # The GPUs kept every MIG mode, instance and ID the killed daemon left.
    assert (live(n.fake), [(gpu.mig_mode, gpu.mig_pending) for gpu in n.fake.gpus]) == killed
    return restarted


def assert_only_the_completed_claim_left(n: Node, restarted: NvidiaBackend, before: set[Any], where: str) -> None:
    assert live(n.fake) == before, where  # same GI and CI IDs: nothing destroyed or recreated
    left = OwnershipJournal.under(n.state_dir).all_entries()
    assert {(e.claim_uid, e.device) for e in left} == {(COMPLETED.uid, COMPLETED_DEVICES[0])}, where
    assert [(c.claim_uid, c.devices) for c in restarted.recorded_claims()] == [(COMPLETED.uid, COMPLETED_DEVICES)], where


@pytest.mark.parametrize("record_lost", [False, True], ids=["rollback", "record-lost"])
def test_kill_at_every_step_of_a_dynamic_prepare(
    node: Callable[[], Node], monkeypatch: pytest.MonkeyPatch, record_lost: bool
) -> None:
    total = steps_of(lambda n: n.backend.prepare(KILLED, alloc(KILLED_DEVICES)), node, monkeypatch)
    assert total >= 1 + 2 * len(KILLED_DEVICES)  # the journal's intents, and a GI and a CI per device
    kills_with_instances = 0
    for at, after, where in kill_points(total):
        n = node()
        before = live(n.fake)  # the completed claim's instance and the admin's
        with monkeypatch.context() as patch:
            install(KillSwitch(at, after), n.fake, patch)
            with pytest.raises(Killed):
                n.backend.prepare(KILLED, alloc(KILLED_DEVICES))
        # Right after the kill: each instance that exists is the admin's or has a recorded owner.
        recorded = {entry.key for entry in OwnershipJournal.under(n.state_dir).all_entries()}
        assert keys(n.fake) - {n.admin} <= recorded, where
        restarted = restart(n)
        # Even with no checkpoint record, the journal reserves every device of the claim whose instance exists.
        existing = {name for name in KILLED_DEVICES if key_of(n.fake, name) in keys(n.fake)}
        reserved = {c.claim_uid: set(c.devices) for c in restarted.recorded_claims()}
        assert existing <= reserved.get(KILLED.uid, set()), where
        kills_with_instances += bool(existing)
        if record_lost:
            # Start-up rebuilds the claim from the journal as a completed one (reserved) with the state the journal
            # gives, reconcile gets that state with the others, and the kubelet's unprepare releases it later.
            journal_states = {c.claim_uid: c.state for c in restarted.recorded_claims()}
            restarted.reconcile([n.completed_state, journal_states.get(KILLED.uid, {})])
            restarted.unprepare(KILLED, journal_states.get(KILLED.uid, {}))
        else:
            restarted.unprepare(KILLED, {})  # recovery's rollback of PrepareStarted without backend state
            restarted.reconcile([n.completed_state])
        assert_only_the_completed_claim_left(n, restarted, before, where)
        # The kubelet's retry prepares the claim afresh on the same placements.
        retried = restarted.prepare(KILLED, alloc(KILLED_DEVICES))
        assert sorted(e["device"] for e in retried.state["migInstances"]) == sorted(KILLED_DEVICES), where
    assert kills_with_instances >= len(KILLED_DEVICES)  # the checks above saw instances the kill left behind


def test_kill_at_every_step_of_a_dynamic_unprepare(node: Callable[[], Node], monkeypatch: pytest.MonkeyPatch) -> None:
    """The restart finishes the unprepare from the recorded state; until then every instance left is still recorded."""

    def prepared(n: Node) -> dict[str, Any]:
        return dict(n.backend.prepare(KILLED, alloc(KILLED_DEVICES)).state)

    total = steps_of(lambda n: n.backend.unprepare(KILLED, prepared(n)), node, monkeypatch) - steps_of(prepared, node, monkeypatch)
    assert total >= 2 * len(KILLED_DEVICES)  # a CI and a GI destroyed per device
    for at, after, where in kill_points(total):
        n = node()
        before = live(n.fake)
        state = prepared(n)
        with monkeypatch.context() as patch:
            install(KillSwitch(at, after), n.fake, patch)
            with pytest.raises(Killed):
                n.backend.unprepare(KILLED, state)
        recorded = {entry.key for entry in OwnershipJournal.under(n.state_dir).all_entries()}
        assert keys(n.fake) - {n.admin} <= recorded, where
        restarted = restart(n)
        restarted.unprepare(KILLED, state)  # recovery finishes an unprepare after UnprepareStarted
        restarted.reconcile([n.completed_state])
        assert_only_the_completed_claim_left(n, restarted, before, where)
