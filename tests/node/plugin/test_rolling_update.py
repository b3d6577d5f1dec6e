"""Two driver instances (old and new pod of a rolling update) sharing one plugin directory."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.node.conftest import make_settings, put_claim
from tests.node.example_backend import DRIVER, ExampleBackend

from tests.support import eventually
from dra_driver.node import checkpoint as checkpoint_module
from dra_driver.node.checkpoint import Checkpoint, ClaimRecord, CheckpointDevice, PREPARE_STARTED
from dra_driver.node.daemon import Daemon
from dra_driver.kube.claims import ClaimReader
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.prepare import HOLD_ENV
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import BackendSettings


class Instance:
    def __init__(self, root: Path, apiserver, pod_uid: str) -> None:
        self.settings = make_settings(root, pod_uid=pod_uid)
        self.backend = ExampleBackend(BackendSettings(node_name="node-a"))
        self.daemon = Daemon([self.backend], ClaimReader(apiserver.json_api()), self.settings)
        self.paths = PluginPaths(self.settings.kubelet_dir, DRIVER, pod_uid, self.settings.state_dir)

    def start(self) -> Instance:
        status = self.daemon.start()
        assert status.running == [DRIVER], status.failed
        return self

    def connect(self):
        return register(self.paths.registration_socket)

    def ops(self) -> list[str]:
        return [op for op, _ in self.backend.calls]


@pytest.fixture
def instances(short_tmp: Path, apiserver) -> Iterator[list[Instance]]:
    made: list[Instance] = []
    yield made
    for inst in made:
        inst.daemon.stop()


def test_new_instance_start_leaves_a_claim_the_old_instance_is_preparing(short_tmp, apiserver, instances, monkeypatch):
    hold = short_tmp / "hold"
    hold.mkdir()
    monkeypatch.setenv(HOLD_ENV, str(hold))
    old = Instance(short_tmp, apiserver, "pod-old")
    instances.append(old.start())
    monkeypatch.delenv(HOLD_ENV)
    ref = put_claim(apiserver, "job", {"gpu": ["gpu-0"]})
    answer: dict[str, object] = {}
    worker = threading.Thread(target=lambda: answer.setdefault("r", old.connect().prepare([ref])))
    worker.start()
    eventually((hold / ref.uid).exists)  # old instance: backend done, spec written, not yet completed

    new = Instance(short_tmp, apiserver, "pod-new")
    instances.append(new.start())  # recover() runs here
    assert "unprepare" not in new.ops() and "reconcile" not in new.ops()
    (hold / ref.uid).unlink()
    worker.join(10)

    result = answer["r"].claims[ref.uid]  # type: ignore[attr-defined]
    assert result.error == ""
    spec = old.settings.cdi_dir / f"k8s.{DRIVER}-device_{ref.uid}.json"
    assert spec.exists(), "the new instance removed the spec of a claim the old one returned"
    record = Checkpoint(old.paths.checkpoint, old.settings.boot_id_path)
    record.load()
    assert record.get(ref.uid) is not None and record.get(ref.uid).completed


def test_claim_prepared_by_one_instance_is_unprepared_by_the_other(short_tmp, apiserver, instances):
    old = Instance(short_tmp, apiserver, "pod-old")
    new = Instance(short_tmp, apiserver, "pod-new")
    instances.extend([old.start(), new.start()])
    ref = put_claim(apiserver, "job", {"gpu": ["gpu-1"]})
    assert old.connect().prepare([ref]).claims[ref.uid].error == ""
    # The new instance sees the device as held, and can release it.
    other = put_claim(apiserver, "other", {"gpu": ["gpu-1"]})
    assert "gpu-1" in new.connect().prepare([other]).claims[other.uid].error
    assert new.connect().unprepare([ref]).claims[ref.uid].error == ""
    assert ("unprepare", {"uid": ref.uid, "state": {"uid": ref.uid, "devices": ["gpu-1"]}}) in new.backend.calls
    assert not (old.settings.cdi_dir / f"k8s.{DRIVER}-device_{ref.uid}.json").exists()
    assert old.connect().prepare([other]).claims[other.uid].error == ""
    assert old.paths.claim_locks_dir is not None and old.paths.claim_locks_dir.is_dir()
    assert not (old.paths.claim_locks_dir / f"{ref.uid}.lock").exists(), "lock file of a gone claim left behind"


def test_an_instance_alone_never_rereads_the_checkpoint(short_tmp, apiserver, instances):
    """Re-reading every record file in every checkpoint section made each prepare O(live claims)."""
    old = Instance(short_tmp, apiserver, "pod-old")
    instances.append(old.start())
    service = old.daemon.plugins[DRIVER].service
    conn = old.connect()
    refs = [put_claim(apiserver, f"c{i}", {"gpu": [f"gpu-{i}"]}) for i in range(6)]
    for ref in refs:
        assert conn.prepare([ref]).claims[ref.uid].error == ""
    assert service.checkpoint_reloads == 1  # the start-up load only
    new = Instance(short_tmp, apiserver, "pod-new")
    instances.append(new.start())  # another instance held the shared lock (its recovery)
    assert conn.unprepare([refs[0]]).claims[refs[0].uid].error == ""
    assert service.checkpoint_reloads == 2  # so the next section re-read once
    assert conn.unprepare([refs[1]]).claims[refs[1].uid].error == ""
    assert service.checkpoint_reloads == 2


def test_new_instance_rolls_back_a_claim_whose_preparer_died(short_tmp, apiserver, instances):
    settings = make_settings(short_tmp, pod_uid="pod-new")
    paths = PluginPaths(settings.kubelet_dir, DRIVER, "pod-new", settings.state_dir)
    dead = Checkpoint(paths.checkpoint, settings.boot_id_path)
    dead.put(ClaimRecord("dead-uid", "default", "gone", PREPARE_STARTED, [CheckpointDevice("gpu", "node-a", "gpu-2")], backend_state={"x": 1}))
    new = Instance(short_tmp, apiserver, "pod-new")
    instances.append(new.start())
    assert ("unprepare", {"uid": "dead-uid", "state": {"x": 1}}) in new.backend.calls
    assert "reconcile" in new.ops()


def test_different_claims_run_in_parallel_with_pod_uid(short_tmp, apiserver, instances):
    """Within one instance and across two, claims of different UIDs overlap inside the backend."""
    old = Instance(short_tmp, apiserver, "pod-old")
    new = Instance(short_tmp, apiserver, "pod-new")
    instances.extend([old.start(), new.start()])
    barrier = threading.Barrier(3, timeout=5)
    for inst in (old, new):
        original = inst.backend.prepare

        def slow(claim, devices, original=original):
            barrier.wait()  # BrokenBarrierError if the file lock serialized the claims
            return original(claim, devices)

        inst.backend.prepare = slow  # type: ignore[method-assign]
    a, b, c = (put_claim(apiserver, n, {"gpu": [f"gpu-{i}"]}) for i, n in enumerate(("a", "b", "c")))
    results: dict[str, str] = {}
    t = threading.Thread(target=lambda: results.update({c.uid: new.connect().prepare([c]).claims[c.uid].error}))
    t.start()
    response = old.connect().prepare([a, b])
    t.join(10)
    assert response.claims[a.uid].error == "" and response.claims[b.uid].error == "" and results[c.uid] == ""


def test_same_claim_from_two_instances_prepares_once(short_tmp, apiserver, instances):
    old = Instance(short_tmp, apiserver, "pod-old")
    new = Instance(short_tmp, apiserver, "pod-new")
    instances.extend([old.start(), new.start()])
    ref = put_claim(apiserver, "job", {"gpu": ["gpu-3"]})
    out: list[object] = []
    threads = [threading.Thread(target=lambda i=i: out.append(i.connect().prepare([ref]).claims[ref.uid])) for i in (old, new)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert [r.error for r in out] == ["", ""]  # type: ignore[attr-defined]
    assert [d.cdi_device_ids for d in out[0].devices] == [d.cdi_device_ids for d in out[1].devices]  # type: ignore[attr-defined]
    assert old.ops().count("prepare") + new.ops().count("prepare") == 1


def test_two_writers_with_the_same_pid_never_clobber_each_other(tmp_path, monkeypatch):
    """Two instances (two pods, both PID 1) write records side by side; every record survives, no temp file stays."""
    monkeypatch.setattr(checkpoint_module.os, "getpid", lambda: 1)
    boot = tmp_path / "boot"
    boot.write_text("b\n")
    writers = [Checkpoint(tmp_path / "checkpoint.d", boot) for _ in range(2)]
    for i in range(3):
        for n, writer in enumerate(writers):
            writer.put(ClaimRecord(f"uid-{n}-{i}", "ns", "c", PREPARE_STARTED))
    reader = Checkpoint(tmp_path / "checkpoint.d", boot)
    reader.load()
    assert sorted(r.uid for r in reader.records()) == sorted(f"uid-{n}-{i}" for n in range(2) for i in range(3))
    assert not [p for p in (tmp_path / "checkpoint.d").iterdir() if p.name.startswith(".")]
