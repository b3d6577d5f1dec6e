"""Claim calls that arrive while start-up recovery still runs (the sockets serve before it finishes).

The daemon (example backend, subprocess) is held inside recovery, after the records were loaded and before
anything was rebuilt or rolled back (hold point "during-recovery"): the kubelet can already register it, a
prepare, an unprepare and a conflicting new claim wait and are then answered exactly as after a finished
recovery; a call whose deadline comes first gets an error the kubelet retries; a kill -9 in that window
loses no reservation; a recovery that fails refuses every claim call.
"""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from tests.node.plugin.crash_support import hold_at, registers, start_daemon
from tests.support import eventually

from tests.node.conftest import put_claim
from tests.node.example_backend import DRIVER, ExampleBackend

from dra_driver.node import cdi
from dra_driver.node.checkpoint import Checkpoint
from dra_driver.kube.claims import ClaimReader
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.prepare import RECOVERY_HOLD, PrepareService
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import BackendSettings, ClaimRef


def _ids(response: Any, uid: str) -> list[list[str]]:
    entry = response.claims[uid]
    assert entry.error == "", entry.error
    return [list(d.cdi_device_ids) for d in entry.devices]


def _prepared_then_stopped(apiserver: Any, root: Path, paths: PluginPaths) -> tuple[dict[str, ClaimRef], dict[str, list[list[str]]]]:
    """Claims a (gpu-0) and b (gpu-1) prepared by a daemon stopped with SIGTERM; x (gpu-0) allocated, not prepared."""
    refs = {name: put_claim(apiserver, name, {"gpu": [device]}) for name, device in (("a", "gpu-0"), ("b", "gpu-1"), ("x", "gpu-0"))}
    proc = start_daemon(apiserver.url, root)
    try:
        eventually(lambda: registers(paths), what="daemon to serve")
        conn = register(paths.registration_socket)
        answers = {name: _ids(conn.prepare([refs[name]]), refs[name].uid) for name in ("a", "b")}
        conn.close()
    finally:
        proc.terminate()
        proc.wait(15)
    return refs, answers


def _held_in_recovery(apiserver: Any, root: Path, paths: PluginPaths, refs: dict[str, ClaimRef]) -> tuple[Any, Path, Any]:
    """(daemon, hold dir, kubelet connection) of a daemon that serves while held inside recovery."""
    hold = root / "hold"
    hold.mkdir(exist_ok=True)
    hold_at(hold, RECOVERY_HOLD, "during-recovery")
    for ref in refs.values():
        hold_at(hold, ref.uid, "never")
    proc = start_daemon(apiserver.url, root, hold)
    try:
        eventually((hold / RECOVERY_HOLD).exists, what="recovery to reach its hold point")
        eventually(lambda: registers(paths), what="the sockets to serve during recovery")
        return proc, hold, register(paths.registration_socket)
    except BaseException:
        proc.kill()
        proc.wait(10)
        raise


def test_calls_during_recovery_wait_and_are_answered_as_after_it(apiserver: Any, root: Path) -> None:
    paths = PluginPaths(root / "kubelet", DRIVER, state_dir=root / "run")
    refs, first = _prepared_then_stopped(apiserver, root, paths)
    proc, hold, conn = _held_in_recovery(apiserver, root, paths, refs)
    try:
        # A deadline that comes before recovery ends: an error for the kubelet to retry, nothing done.
        early = conn.prepare([refs["a"]], 1.0).claims[refs["a"].uid].error
        assert "still reading its checkpoint" in early
        with ThreadPoolExecutor(3) as pool:
            again = pool.submit(conn.prepare, [refs["a"]], 30.0)
            released = pool.submit(conn.unprepare, [refs["b"]], 30.0)
            conflicting = pool.submit(conn.prepare, [refs["x"]], 30.0)
            time.sleep(0.5)
            assert not (again.done() or released.done() or conflicting.done()), "a claim call ran before recovery finished"
            assert Path(cdi.spec_path(root / "cdi", DRIVER, refs["b"].uid)).exists()
            (hold / RECOVERY_HOLD).unlink()
            assert _ids(again.result(30), refs["a"].uid) == first["a"]
            assert released.result(30).claims[refs["b"].uid].error == ""
            assert refs["a"].uid in conflicting.result(30).claims[refs["x"].uid].error  # gpu-0 is a's
        assert not Path(cdi.spec_path(root / "cdi", DRIVER, refs["b"].uid)).exists()
        conn.close()
    finally:
        proc.terminate()
        proc.wait(15)


def test_kill_during_recovery_loses_no_reservation(apiserver: Any, root: Path) -> None:
    paths = PluginPaths(root / "kubelet", DRIVER, state_dir=root / "run")
    refs, first = _prepared_then_stopped(apiserver, root, paths)
    proc, hold, conn = _held_in_recovery(apiserver, root, paths, refs)
    try:
        with ThreadPoolExecutor(2) as pool:
            waiting = [pool.submit(conn.prepare, [refs["x"]], 30.0), pool.submit(conn.unprepare, [refs["b"]], 30.0)]
            time.sleep(0.3)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            for call in waiting:
                with pytest.raises(Exception):
                    call.result(10)
        conn.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)

    proc = start_daemon(apiserver.url, root)
    try:
        eventually(lambda: registers(paths), what="restarted daemon to serve")
        conn = register(paths.registration_socket)
        assert {name: _ids(conn.prepare([refs[name]]), refs[name].uid) for name in ("a", "b")} == first
        assert refs["a"].uid in conn.prepare([refs["x"]]).claims[refs["x"].uid].error  # gpu-0 still a's
        conn.close()
    finally:
        proc.terminate()
        proc.wait(15)


class _BrokenReconcile(ExampleBackend):
    def reconcile(self, states: Any) -> None:  # type: ignore[override]
        raise RuntimeError("backend lost")


def test_failed_recovery_refuses_every_claim_call_saying_why(tmp_path: Path, apiserver: Any) -> None:
    (tmp_path / "boot_id").write_text("boot-1\n")
    backend = _BrokenReconcile(BackendSettings(node_name="node-a"))
    service = PrepareService(backend, ClaimReader(apiserver.json_api()), Checkpoint(tmp_path / "ckpt", tmp_path / "boot_id"), tmp_path / "cdi")
    ref = put_claim(apiserver, "a", {"gpu": ["gpu-0"]})
    try:
        service.start_recovery()
        assert service.wait_recovered(10)
        error = service.prepare([ref])[ref.uid].error
        assert "start-up recovery failed (RuntimeError: backend lost)" in error
        assert "start-up recovery failed" in service.unprepare([ref])[ref.uid]
        assert backend.calls == [] and service.checkpoint_record(ref.uid) is None  # nothing prepared, nothing freed
    finally:
        service.close()
