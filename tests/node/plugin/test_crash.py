"""kill -9 in the middle of a prepare, restart, and check the rollback and the repeated calls."""

from __future__ import annotations

import json
import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from tests.node.plugin.crash_support import registers, start_daemon
from tests.node.example_backend import DRIVER, journal

from tests.support import eventually
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import ClaimRef


def test_kill_mid_prepare_rolls_back_on_restart(apiserver, root: Path):
    paths = PluginPaths(root / "kubelet", DRIVER, state_dir=root / "run")
    stored = apiserver.store.put(allocated_claim_object("job", "default", DRIVER, "node-a", {"gpu": ["gpu-0", "gpu-1"]}))
    ref = ClaimRef("default", "job", stored["metadata"]["uid"])
    hold = root / "hold"
    hold.mkdir()
    proc = start_daemon(apiserver.url, root, hold)
    try:
        eventually(paths.registration_socket.exists, what="registration socket")
        conn = register(paths.registration_socket)
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(conn.prepare, [ref], 30.0)
            eventually((hold / ref.uid).exists, what="prepare to reach the hold point")
            spec = root / "cdi" / f"k8s.{DRIVER}-device_{ref.uid}.json"
            assert spec.exists()  # written, but the claim is not recorded as completed
            last_line = (paths.checkpoint / f"{ref.uid}.json").read_text().split()[-1]
            record = json.loads(last_line)["body"]["record"]
            assert record["phase"] == "PrepareStarted"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            with pytest.raises(grpc.RpcError):
                pending.result(10)
        conn.close()
        orphan = root / "cdi" / f"k8s.{DRIVER}-device_orphan-uid.json"
        orphan.write_text("{}")
        assert paths.dra_socket.exists()  # a killed process leaves its sockets behind

        proc = start_daemon(apiserver.url, root)
        eventually(lambda: any(e["op"] == "reconcile" for e in journal(root / "state")[2:]), what="restart recovery")
        ops = journal(root / "state")
        assert [e["op"] for e in ops] == ["reconcile", "prepare", "unprepare", "reconcile"]
        assert ops[2]["data"] == {"uid": ref.uid, "state": {"uid": ref.uid, "devices": ["gpu-0", "gpu-1"]}}
        assert ops[3]["data"] == []
        assert not spec.exists() and not orphan.exists()

        eventually(lambda: registers(paths), what="restarted daemon to serve")
        conn = register(paths.registration_socket)
        first = conn.prepare([ref])
        assert first.claims[ref.uid].error == "" and spec.exists()
        assert conn.prepare([ref]) == first
        assert [e["op"] for e in journal(root / "state")].count("prepare") == 2
        conn.close()

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert not paths.registration_socket.exists() and not paths.dra_socket.exists()
        assert spec.exists()  # prepared claims stay prepared across a clean restart
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


