"""Partition modes outlive the daemon, and a daemon killed at any step of a dynamic prepare is recovered.

Real MI300X GPUs keep their compute and memory partition modes when the driver process dies. The simulated
amdsmi keeps them in the node's simulated-hardware state (under the state dir), so the restarted daemon is a
fresh AmdBackend opened from the profile with the same state dir, and meets the modes the killed one left.
The kill is modelled in process: a setter raises an exception nothing in the backend catches (a killed
process runs no rollback), before or after it took effect. Recovery then does what the plugin does: roll the
half-prepared claim back (`unprepare(claim, {})`) and `reconcile` with the live claims' states.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dra_driver.simulation.state import current_document
from dra_driver.backend.interface import AllocatedDevice, ClaimRef

from dra_driver_amd.backend import AmdBackend
from dra_driver_amd.simulated.fake_amdsmi import FakeAmdSmi

from .conftest import OpenBackend

DONE = ClaimRef("ns", "done", "uid-done")
KILLED = ClaimRef("ns", "killed", "uid-killed")
DONE_DEVICE = "gpu-8-136-cpx-nps1-2"  # GPU 1 split into 8 partitions for a claim that completed
# GPU 0: compute mode then memory mode must change. A memory-mode change needs the whole XGMI hive idle, so the
# kill test has no other claim on the node (the completed claim of the first test is on the same hive).
KILLED_DEVICE = "gpu-0-128-qpx-nps4-1"
GPU0, GPU1 = "0000:05:00.0", "0000:26:00.0"
SETTERS = ("amdsmi_set_gpu_compute_partition", "amdsmi_set_gpu_memory_partition")


class Killed(BaseException):
    """kill -9: not an Exception, so no `except` of the backend runs its rollback."""


def alloc(device: str) -> list[AllocatedDevice]:
    return [AllocatedDevice(request="gpu", pool="node-a", device=device, config=None)]


def fake(backend: AmdBackend) -> FakeAmdSmi:
    library = backend.library
    assert isinstance(library, FakeAmdSmi)
    return library


def modes(backend: AmdBackend) -> dict[str, tuple[str | None, str | None]]:
    library = fake(backend)
    library.amdsmi_get_processor_handles()  # what a real call would read first: the node's current state
    return {bdf: library.current_mode(bdf) for bdf in (GPU0, GPU1)}


def test_partition_modes_outlive_the_daemon(open_backend: OpenBackend, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    first = open_backend("mi300x", "dynamic", state_dir=state_dir)
    first.discover()
    state = first.prepare(DONE, alloc(DONE_DEVICE)).state
    assert modes(first)[GPU1] == ("CPX", "NPS1")
    # kill -9: nothing closes or unprepares. The restarted daemon's library is fresh, the GPU is not.
    restarted = open_backend("mi300x", "dynamic", state_dir=state_dir)
    assert modes(restarted) == {GPU0: ("SPX", "NPS1"), GPU1: ("CPX", "NPS1")}
    restarted.reconcile([state])  # the completed claim's partitions stay as they are
    assert fake(restarted).calls == [] and modes(restarted)[GPU1] == ("CPX", "NPS1")
    restarted.unprepare(DONE, state)
    assert modes(restarted)[GPU1] == ("SPX", "NPS1")  # released: back to the default mode
    # Without a state dir the simulation is per process, as before: a new library starts from the profile.
    assert modes(open_backend("mi300x", "dynamic"))[GPU1] == ("SPX", "NPS1")


def _kill_at(step: int, after: bool, backend: AmdBackend, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make the `step`-th setter call raise Killed (before or after it takes effect); the setters called, in order."""
    called: list[str] = []
    library = fake(backend)
    for name in SETTERS:
        original = getattr(library, name)

        def killing(*args: Any, _original: Callable[..., None] = original, _name: str = name) -> None:
            here = len(called)
            called.append(_name)
            if here == step and not after:
                raise Killed
            _original(*args)
            if here == step:
                raise Killed

        monkeypatch.setattr(library, name, killing)
    return called


@pytest.mark.parametrize("step", [0, 1], ids=["compute-mode", "memory-mode"])
@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_kill_at_every_step_of_a_dynamic_prepare(
    open_backend: OpenBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: int, after: bool
) -> None:
    node = open_backend("mi300x", "dynamic", state_dir=tmp_path / "state")
    node.discover()
    with monkeypatch.context() as patch:
        called = _kill_at(step, after, node, patch)
        with pytest.raises(Killed):
            node.prepare(KILLED, alloc(KILLED_DEVICE))
    assert called == list(SETTERS[: step + 1])  # SPX/NPS1 -> QPX/NPS4: the compute mode first, then the memory mode
    restarted = open_backend("mi300x", "dynamic", state_dir=tmp_path / "state")
    # The GPU as the kill left it: the restarted daemon meets it half switched.
    assert modes(restarted)[GPU0] == [("SPX", "NPS1"), ("QPX", "NPS1"), ("QPX", "NPS1"), ("QPX", "NPS4")][2 * step + after]
    restarted.unprepare(KILLED, {})  # recovery's rollback of a claim whose prepare never finished
    restarted.reconcile([])
    assert modes(restarted) == {GPU0: ("SPX", "NPS1"), GPU1: ("SPX", "NPS1")}  # nobody uses it: the default mode
    retried = restarted.prepare(KILLED, alloc(KILLED_DEVICE))  # the kubelet's retry prepares the claim afresh
    assert [d.device for d in retried.devices] == [KILLED_DEVICE] and modes(restarted)[GPU0] == ("QPX", "NPS4")


@pytest.mark.parametrize("gpus", [["a list"], {GPU1: {"compute": 8, "memory": "NPS1"}}, {GPU1: "CPX"}], ids=["list", "int-mode", "string-entry"])
def test_saved_modes_of_the_wrong_type_are_logged_and_ignored(
    open_backend: OpenBackend, tmp_path: Path, caplog: pytest.LogCaptureFixture, gpus: Any
) -> None:
    """A state file with a valid header (version, profile, boot) and wrongly typed modes: the restarted daemon
    starts from the profile's modes, it does not fail every restart."""
    state_dir = tmp_path / "state"
    first = open_backend("mi300x", "dynamic", state_dir=state_dir)
    first.discover()
    first.prepare(DONE, alloc(DONE_DEVICE))
    path = state_dir / "simulated-hardware" / "amd.json"
    document = current_document(path.read_bytes(), path)  # each change appends one line
    document["hardware"]["gpus"] = gpus
    path.write_text(json.dumps(document))
    with caplog.at_level(logging.WARNING):
        restarted = open_backend("mi300x", "dynamic", state_dir=state_dir)
        assert modes(restarted) == {GPU0: ("SPX", "NPS1"), GPU1: ("SPX", "NPS1")}
    assert "simulated hardware state unreadable" in caplog.text
