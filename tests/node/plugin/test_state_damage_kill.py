"""kill -9 the daemon, damage its state, restart: no device is freed, lost or handed to a second claim.

Subprocess daemon (example backend, journal on disk). One run covers every damage kind of
state_damage.DAMAGE_KINDS at once (one claim per kind), and an unprepare killed after it removed the
spec but before it dropped the record.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from tests.node.plugin.crash_support import hold_at, registers, start_daemon
from tests.support import eventually
from tests.node.conftest import put_claim
from tests.node.example_backend import DRIVER, journal
from tests.node.plugin.state_damage import DAMAGE_KINDS, damage_record

from dra_driver.node import cdi
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.sockets import PluginPaths


def _kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


def test_every_damage_kind_after_kill_keeps_each_claim_reserved_answerable_and_unpreparable(apiserver, root: Path) -> None:
    paths = PluginPaths(root / "kubelet", DRIVER, state_dir=root / "run")
    kinds = list(DAMAGE_KINDS)
    devices = len(kinds) + 1
    refs = {kind: put_claim(apiserver, kind, {"gpu": [f"gpu-{i}"]}) for i, kind in enumerate(kinds)}
    refs["intact"] = put_claim(apiserver, "intact", {"gpu": [f"gpu-{len(kinds)}"]})
    proc = start_daemon(apiserver.url, root, devices=devices)
    try:
        eventually(lambda: registers(paths), what="daemon to serve")
        conn = register(paths.registration_socket)
        first = conn.prepare(list(refs.values()))
        assert all(first.claims[r.uid].error == "" for r in refs.values())
        conn.close()
        _kill(proc)
        specs = {name: Path(cdi.spec_path(root / "cdi", DRIVER, r.uid)).read_bytes() for name, r in refs.items()}
        for kind in kinds:
            damage_record(paths.checkpoint, refs[kind].uid, kind, refs["intact"].uid)
        before = len(journal(root / "state"))

        proc = start_daemon(apiserver.url, root, devices=devices)
        eventually(lambda: registers(paths), what="restarted daemon to serve")
        ops = journal(root / "state")[before:]
        assert [e["op"] for e in ops] == ["reconcile"]  # nothing undone at start
        assert sorted(s["uid"] for s in ops[0]["data"]) == sorted(r.uid for r in refs.values())  # every claim live
        assert {name: Path(cdi.spec_path(root / "cdi", DRIVER, r.uid)).read_bytes() for name, r in refs.items()} == specs

        conn = register(paths.registration_socket)
        rivals = {kind: put_claim(apiserver, f"rival-{kind}", {"gpu": [f"gpu-{i}"]}) for i, kind in enumerate(kinds)}
        refused = conn.prepare(list(rivals.values()))
        for kind, rival in rivals.items():
            assert refs[kind].uid in refused.claims[rival.uid].error, (kind, refused.claims[rival.uid].error)
        again = conn.prepare(list(refs.values()))
        for name, ref in refs.items():
            assert again.claims[ref.uid] == first.claims[ref.uid], name

        done = conn.unprepare(list(refs.values()))
        assert all(done.claims[r.uid].error == "" for r in refs.values())
        undone = {e["data"]["uid"]: e["data"]["state"] for e in journal(root / "state")[before + 1 :] if e["op"] == "unprepare"}
        assert undone == {r.uid: {"uid": r.uid, "devices": [d]} for r, d in ((r, f"gpu-{i}") for i, r in enumerate(refs.values()))}
        assert cdi.our_spec_files(root / "cdi", DRIVER) == {} and cdi.our_claim_files(root / "cdi", DRIVER) == {}
        assert [p.name for p in paths.checkpoint.iterdir() if ".corrupt-" not in p.name] == []
        assert all(conn.prepare(list(rivals.values())).claims[r.uid].error == "" for r in rivals.values())
        conn.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_unprepare_killed_after_removing_the_spec_is_finished_and_never_answered_from(apiserver, root: Path) -> None:
    paths = PluginPaths(root / "kubelet", DRIVER, state_dir=root / "run")
    ref = put_claim(apiserver, "a", {"gpu": ["gpu-2"]})
    hold = root / "hold"
    hold.mkdir()
    hold_at(hold, ref.uid, "after-spec-removed")
    proc = start_daemon(apiserver.url, root, hold)
    try:
        eventually(lambda: registers(paths), what="daemon to serve")
        conn = register(paths.registration_socket)
        assert conn.prepare([ref]).claims[ref.uid].error == ""
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(conn.unprepare, [ref], 30.0)
            eventually((hold / ref.uid).exists, what="unprepare to remove the spec")
            spec = Path(cdi.spec_path(root / "cdi", DRIVER, ref.uid))
            assert not spec.exists() and (paths.checkpoint / f"{ref.uid}.json").exists()
            _kill(proc)
            with pytest.raises(grpc.RpcError):
                pending.result(10)
        conn.close()
        before = len(journal(root / "state"))
        proc = start_daemon(apiserver.url, root)
        eventually(lambda: registers(paths), what="restarted daemon to serve")
        assert [e["op"] for e in journal(root / "state")[before:]] == ["unprepare", "reconcile"]  # finished at start
        conn = register(paths.registration_socket)
        answer = conn.prepare([ref]).claims[ref.uid]  # the claim is used again: a fresh prepare
        assert answer.error == ""
        names = cdi.device_names(json.loads(spec.read_text()))
        assert {i.partition("=")[2] for d in answer.devices for i in d.cdi_device_ids} <= names
        assert [e["op"] for e in journal(root / "state")[before:]] == ["unprepare", "reconcile", "prepare"]
        conn.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
