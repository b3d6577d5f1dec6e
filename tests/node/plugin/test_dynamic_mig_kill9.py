"""kill -9 of a real `dra-driver run --partitioning dynamic` process with a MIG device prepared: the restarted
process finds the GPU as the killed one left it (MIG on, the claim's instance with its IDs, in the node's
simulated-hardware state under --state-dir), answers the kubelet's repeated prepare with the same devices
without switching MIG mode again, prepares a second slice of the same GPU beside it, and unprepares both; and a
kill -9 between a MIG instance's creation and PrepareCompleted, rolled back from the ownership journal alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from tests.node.plugin.crash_support import hold_at, record_of
from tests.support import eventually

from dra_driver.node import cdi
from dra_driver.node.plugin.prepare import HOLD_ENV
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.simulation.api_server import SimApiServer
from dra_driver.simulation.state import current_document
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import ClaimRef

pytest.importorskip("dra_driver_nvidia.backend")
DRIVER = "gpu.nvidia.com"
FIRST, SECOND = "gpu-2-mig-1g10gb-19-0", "gpu-2-mig-1g10gb-19-1"  # dgx-h100: GPU 2 starts with MIG off


def spawn(server: SimApiServer, work: Path, log: Path) -> subprocess.Popen[bytes]:
    for owned_by_others in ("k/plugins_registry", "k/plugins", "c"):  # the kubelet's and the runtime's: run creates none
        (work / owned_by_others).mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "dra_driver.cli.main", "-v", "run", "--profile", "dgx-h100", "--simulated-root", "none", "--partitioning", "dynamic",
        "--node-name", "node-a", "--api-server", server.url,
        "--kubelet-dir", str(work / "k"), "--state-dir", str(work / "s"), "--cdi-dir", str(work / "c"),
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=out)


def gpu2(work: Path) -> dict[str, Any]:
    """GPU 2 in the node's simulated-hardware state file (what a real GPU would keep)."""
    path = work / "s" / "simulated-hardware" / "nvidia.json"
    document = current_document(path.read_bytes(), path)  # each change appends one line
    return next(gpu for uuid, gpu in document["hardware"]["gpus"].items() if uuid.startswith("GPU-daf2b511"))


def _prepare_once(paths: PluginPaths, ref: ClaimRef) -> None:
    with closing(register(paths.registration_socket)) as conn:
        conn.prepare([ref])


def claim(server: SimApiServer, name: str, device: str) -> ClaimRef:
    stored = server.store.put(allocated_claim_object(name, "default", DRIVER, "node-a", {"gpu": [device]}))
    return ClaimRef("default", name, stored["metadata"]["uid"])


def test_a_restarted_daemon_recovers_against_the_mig_state_the_killed_one_left(apiserver: SimApiServer, short_tmp: Path) -> None:
    paths = PluginPaths(short_tmp / "k", DRIVER)
    first_ref = claim(apiserver, "first", FIRST)
    daemon = spawn(apiserver, short_tmp, short_tmp / "first.log")
    try:
        eventually(paths.registration_socket.exists, what="the first daemon's registration socket")
        with closing(register(paths.registration_socket)) as conn:
            entry = conn.prepare([first_ref]).claims[first_ref.uid]
        assert entry.error == ""
        cdi_ids = list(entry.devices[0].cdi_device_ids)
        left = gpu2(short_tmp)
        assert left["migMode"] == 1 and len(left["instances"]) == 1
    finally:
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait()
    assert "switched MIG mode for a claim" in (short_tmp / "first.log").read_text()

    daemon = spawn(apiserver, short_tmp, short_tmp / "second.log")
    try:
        eventually(paths.registration_socket.exists, what="the restarted daemon's registration socket")
        second_ref = claim(apiserver, "second", SECOND)
        with closing(register(paths.registration_socket)) as conn:
            again = conn.prepare([first_ref]).claims[first_ref.uid]  # the kubelet prepares its claims again
            assert again.error == "" and list(again.devices[0].cdi_device_ids) == cdi_ids
            assert conn.prepare([second_ref]).claims[second_ref.uid].error == ""
            assert gpu2(short_tmp)["instances"][0] == left["instances"][0]  # untouched: same GI, CI and MIG UUID
            assert len(gpu2(short_tmp)["instances"]) == 2
            released = conn.unprepare([first_ref, second_ref]).claims
            assert released[first_ref.uid].error == "" and released[second_ref.uid].error == ""
        assert gpu2(short_tmp)["instances"] == []
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    log = (short_tmp / "second.log").read_text()
    assert "switched MIG mode for a claim" not in log  # the GPU kept its MIG mode: nothing to switch
    assert "destroyed MIG device" in log


def test_a_daemon_killed_between_mig_creation_and_prepare_completed_leaves_nothing(
    apiserver: SimApiServer, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 while one claim waits after the backend created its MIG instance (no CDI spec yet) and another after
    its CDI spec was written (PrepareCompleted not recorded). NVIDIA with a state dir undoes a claim from its own
    journal (`undoes_from_own_records`), so the plugin recorded no backend state before the spec: the PrepareStarted
    records hold none. The restart rolls both back from the journal alone (instances destroyed, journal, specs and
    records gone) and both prepare again."""
    paths = PluginPaths(short_tmp / "k", DRIVER, state_dir=short_tmp / "s")
    hold = short_tmp / "hold"
    hold.mkdir()
    refs = {"after-backend": claim(apiserver, "at-backend", FIRST), "after-cdi": claim(apiserver, "at-cdi", SECOND)}
    for point, ref in refs.items():
        hold_at(hold, ref.uid, point)
    monkeypatch.setenv(HOLD_ENV, str(hold))
    daemon = spawn(apiserver, short_tmp, short_tmp / "first.log")
    pool = ThreadPoolExecutor(len(refs))
    try:
        eventually(paths.registration_socket.exists, what="the first daemon's registration socket")
        for ref in refs.values():  # answered never: the daemon dies holding them
            pool.submit(_prepare_once, paths, ref)
            eventually((hold / ref.uid).exists, what=f"claim {ref.name} to reach its hold point")
        assert len(gpu2(short_tmp)["instances"]) == 2
        for ref in refs.values():
            record = record_of(paths, ref.uid)
            assert record is not None and record["phase"] == "PrepareStarted" and not record["backend_state"]
        assert Path(cdi.spec_path(short_tmp / "c", DRIVER, refs["after-cdi"].uid)).exists()
        assert sorted(p.name for p in (short_tmp / "s" / "nvidia" / "mig-owned").iterdir()) == sorted(f"{r.uid}.json" for r in refs.values())
    finally:
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait()
        pool.shutdown(wait=True)
    monkeypatch.delenv(HOLD_ENV)

    daemon = spawn(apiserver, short_tmp, short_tmp / "second.log")
    try:
        eventually(paths.registration_socket.exists, what="the restarted daemon's registration socket")
        with closing(register(paths.registration_socket)) as conn:
            eventually(lambda: gpu2(short_tmp)["instances"] == [], what="recovery to destroy the half-prepared claims' instances")
            for ref in refs.values():
                eventually(lambda r=ref: record_of(paths, r.uid) is None, what=f"the record of {ref.name} to be rolled back")
                assert not Path(cdi.spec_path(short_tmp / "c", DRIVER, ref.uid)).exists()
            assert list((short_tmp / "s" / "nvidia" / "mig-owned").iterdir()) == []
            answers = conn.prepare(list(refs.values())).claims
            assert all(answers[ref.uid].error == "" for ref in refs.values()), answers
            assert len(gpu2(short_tmp)["instances"]) == 2
            released = conn.unprepare(list(refs.values())).claims
            assert all(released[ref.uid].error == "" for ref in refs.values())
        assert gpu2(short_tmp)["instances"] == []
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    assert "rolling back half-prepared claim" in (short_tmp / "second.log").read_text()
