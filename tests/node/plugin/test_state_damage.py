"""Damaged or lost plugin state never frees a device (in-process daemon, restarted over the same dirs).

Each damage kind of state_damage.DAMAGE_KINDS is applied to a prepared claim's record between two
daemon runs; the restarted daemon must keep the claim's spec and reservation, answer it again, refuse
its device to another claim, and unprepare it completely. Also: damage with the spec gone too, a
checkpoint directory that is a file, a spec lost under an intact record, leftover temp files, and a
prepare whose CDI write fails (rolled back; a failing rollback keeps the reservation).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.node.conftest import make_settings
from tests.node.example_backend import DRIVER, ExampleBackend
from tests.node.plugin.state_damage import DAMAGE_KINDS, damage_record

from dra_driver.common import atomic_file

from dra_driver.node import cdi
from dra_driver.node.checkpoint import Checkpoint
from dra_driver.node.daemon import Daemon
from dra_driver.common.errors import DeviceError
from dra_driver.kube.claims import ClaimReader
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.kubelet_client import PluginConnection, register
from dra_driver.node.plugin.prepare import PrepareService
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import BackendSettings, ClaimRef


class Node:
    """One root (kubelet, state, CDI dirs) and the daemon currently running on it."""

    def __init__(self, root: Path, apiserver: Any) -> None:
        self.root, self.apiserver = root, apiserver
        self.settings = make_settings(root)
        self.paths = PluginPaths(self.settings.kubelet_dir, DRIVER, state_dir=self.settings.state_dir)
        self.daemon: Daemon | None = None
        self.backend: ExampleBackend | None = None
        self.conn: PluginConnection | None = None

    def start(self) -> PluginConnection:
        self.backend = ExampleBackend(BackendSettings(node_name="node-a"))
        self.daemon = Daemon([self.backend], ClaimReader(self.apiserver.json_api()), self.settings)
        assert self.daemon.start().running == [DRIVER]
        self.conn = register(self.paths.registration_socket)
        return self.conn

    def stop(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None

    def claim(self, name: str, *devices: str) -> ClaimRef:
        stored = self.apiserver.store.put(allocated_claim_object(name, "default", DRIVER, "node-a", {"gpu": list(devices)}))
        return ClaimRef("default", name, stored["metadata"]["uid"])

    def spec(self, ref: ClaimRef) -> Path:
        return Path(cdi.spec_path(self.settings.cdi_dir, DRIVER, ref.uid))

    def record_file(self, ref: ClaimRef) -> Path:
        return self.paths.checkpoint / f"{ref.uid}.json"

    def damage_count(self, kind: str) -> float:
        assert self.daemon is not None
        return self.daemon.metrics.registry.get_sample_value("dra_driver_state_damage_total", {"driver": DRIVER, "kind": kind}) or 0.0

    def unprepares_of(self, ref: ClaimRef) -> list[dict[str, Any]]:
        assert self.backend is not None
        return [data["state"] for op, data in self.backend.calls if op == "unprepare" and data["uid"] == ref.uid]


@pytest.fixture
def node(short_tmp: Path, apiserver: Any) -> Iterator[Node]:
    n = Node(short_tmp, apiserver)
    yield n
    n.stop()


def error_of(response: Any, ref: ClaimRef) -> str:
    return str(response.claims[ref.uid].error)


@pytest.mark.parametrize("kind", DAMAGE_KINDS)
def test_damaged_record_keeps_claim_reserved_answerable_and_unpreparable(node: Node, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    conn = node.start()
    a, other = node.claim("a", "gpu-0"), node.claim("other", "gpu-1")
    first, other_first = conn.prepare([a]), conn.prepare([other])
    assert error_of(first, a) == "" and error_of(other_first, other) == ""
    node.stop()
    spec_before = node.spec(a).read_bytes()
    damage_record(node.paths.checkpoint, a.uid, kind, other.uid)

    caplog.set_level(logging.ERROR)
    conn = node.start()
    assert node.spec(a).read_bytes() == spec_before  # the running container's spec stays
    assert node.unprepares_of(a) == []  # nothing undone for it at start
    assert "rebuilt from evidence" in caplog.text
    assert node.damage_count("rebuilt") == 1
    assert node.damage_count("record") == (0 if kind in ("missing", "zero-byte") else 1)
    b = node.claim("b", "gpu-0")
    refused = error_of(conn.prepare([b]), b)
    assert "gpu-0" in refused and a.uid in refused, refused
    assert conn.prepare([a]) == first  # answered again, CDI IDs that resolve
    assert conn.prepare([other]) == other_first  # the claim whose record was borrowed is untouched

    assert error_of(conn.unprepare([a]), a) == ""
    assert node.unprepares_of(a) == [{"uid": a.uid, "devices": ["gpu-0"]}]  # with the state the spec carried
    assert not node.spec(a).exists() and not os.path.lexists(node.record_file(a))
    assert not Path(cdi.claim_file_path(node.settings.cdi_dir, DRIVER, a.uid)).exists()
    assert error_of(conn.prepare([b]), b) == ""  # and now the device is free


@pytest.mark.parametrize("kind", ["flipped-byte", "torn", "foreign-uid", "random-bytes"])
def test_damaged_record_without_its_spec(node: Node, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    """Record damaged, spec and claim file gone: what the record still shows stays reserved, and the claim is
    never answered with CDI IDs that do not resolve; where nothing shows the devices, that is logged loudly."""
    conn = node.start()
    a, other = node.claim("a", "gpu-0", "gpu-2"), node.claim("other", "gpu-1")
    assert error_of(conn.prepare([a]), a) == "" and error_of(conn.prepare([other]), other) == ""
    node.stop()
    damage_record(node.paths.checkpoint, a.uid, kind, other.uid)
    node.spec(a).unlink()
    Path(cdi.claim_file_path(node.settings.cdi_dir, DRIVER, a.uid)).unlink()

    caplog.set_level(logging.ERROR)
    conn = node.start()
    b = node.claim("b", "gpu-2")
    if kind in ("foreign-uid", "random-bytes"):  # nothing readable names a's devices
        assert "nothing tells which devices" in caplog.text
        assert error_of(conn.prepare([b]), b) == ""
        return
    assert a.uid in error_of(conn.prepare([b]), b)
    again = error_of(conn.prepare([a]), a)
    assert "CDI spec" in again and "delete the pods" in again, again
    assert not node.spec(a).exists()
    assert error_of(conn.unprepare([a]), a) == ""
    assert node.unprepares_of(a) and not os.path.lexists(node.record_file(a))
    assert error_of(conn.prepare([b]), b) == ""


def test_damaged_record_and_lost_spec_are_both_rebuilt_from_the_claim_file(node: Node) -> None:
    conn = node.start()
    a = node.claim("a", "gpu-4")
    first = conn.prepare([a])
    node.stop()
    spec_before = node.spec(a).read_bytes()
    damage_record(node.paths.checkpoint, a.uid, "random-bytes", a.uid)
    node.spec(a).unlink()
    conn = node.start()
    b = node.claim("b", "gpu-4")
    assert a.uid in error_of(conn.prepare([b]), b)
    assert conn.prepare([a]) == first and node.spec(a).read_bytes() == spec_before  # spec rewritten, same IDs
    assert error_of(conn.unprepare([a]), a) == "" and error_of(conn.prepare([b]), b) == ""


def test_checkpoint_directory_replaced_by_a_file_does_not_stop_the_driver(node: Node) -> None:
    conn = node.start()
    a = node.claim("a", "gpu-0")
    first = conn.prepare([a])
    node.stop()
    ckpt = node.paths.checkpoint
    for child in ckpt.iterdir():
        child.unlink()
    ckpt.rmdir()
    ckpt.write_bytes(b"not a directory")

    conn = node.start()
    assert node.damage_count("checkpoint-dir") == 1 and ckpt.is_dir()
    assert len(list(ckpt.parent.glob("checkpoint.d.corrupt-*"))) == 1
    assert conn.prepare([a]) == first  # rebuilt from its spec
    b = node.claim("b", "gpu-0")
    assert a.uid in error_of(conn.prepare([b]), b)
    assert error_of(conn.unprepare([a]), a) == "" and error_of(conn.prepare([b]), b) == ""


@pytest.mark.parametrize("spec_damage", ["deleted", "emptied", "other-claims-devices"])
def test_completed_claim_whose_spec_is_lost_is_answered_only_after_the_spec_is_rewritten(node: Node, spec_damage: str) -> None:
    conn = node.start()
    a, c = node.claim("a", "gpu-0"), node.claim("c", "gpu-5")
    first = conn.prepare([a])
    conn.prepare([c])
    spec = node.spec(a)
    written = spec.read_bytes()
    if spec_damage == "deleted":
        spec.unlink()
    elif spec_damage == "emptied":
        spec.write_bytes(b"")
    else:
        spec.write_bytes(node.spec(c).read_bytes())
    assert conn.prepare([a]) == first
    assert spec.read_bytes() == written


def test_leftover_temp_files_are_removed_at_start_and_never_look_like_specs(node: Node) -> None:
    conn = node.start()
    a = node.claim("a", "gpu-0")
    conn.prepare([a])
    node.stop()
    cdi_dir = node.settings.cdi_dir
    # Named exactly as atomic_file.replace_file names its temp file for a's spec (a kill -9 mid-write).
    fd, name = atomic_file.create_temp(str(node.spec(a)))
    ours = Path(name)
    os.close(fd)
    foreign = cdi_dir / ".k8s.gpu.other.com-device_x.json.abc.tmp"
    foreign.write_text("{}")
    for path in (Path(ours), foreign):
        assert not path.name.endswith((".json", ".yaml"))  # CDI loaders read only those

    node.start()
    assert not Path(ours).exists()
    assert foreign.exists()
    assert node.spec(a).exists()


def test_failed_cdi_write_rolls_the_claim_back(node: Node) -> None:
    conn = node.start()
    a, b = node.claim("a", "gpu-0"), node.claim("b", "gpu-0")
    cdi_dir = node.settings.cdi_dir
    cdi_dir.mkdir(exist_ok=True)
    cdi_dir.rmdir()
    cdi_dir.write_text("a file where the CDI directory should be")
    error = error_of(conn.prepare([a]), a)
    assert error, "prepare must fail when its spec cannot be written"
    assert node.unprepares_of(a) == [{"uid": a.uid, "devices": ["gpu-0"]}]  # backend undone with its state
    assert not os.path.lexists(node.record_file(a))  # reservation released
    cdi_dir.unlink()
    assert error_of(conn.prepare([b]), b) == ""


def test_failed_rollback_keeps_the_reservation(node: Node, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = node.start()
    assert node.backend is not None
    a, b = node.claim("a", "gpu-0"), node.claim("b", "gpu-0")
    cdi_dir = node.settings.cdi_dir
    cdi_dir.mkdir(exist_ok=True)
    cdi_dir.rmdir()
    cdi_dir.write_text("not a directory")

    def cannot_unprepare(claim: ClaimRef, state: Any) -> None:
        raise DeviceError("gpu-0", "stuck")

    monkeypatch.setattr(node.backend, "unprepare", cannot_unprepare)
    caplog.set_level(logging.ERROR)
    assert error_of(conn.prepare([a]), a)
    assert "devices stay reserved" in caplog.text
    assert os.path.lexists(node.record_file(a))
    assert a.uid in error_of(conn.prepare([b]), b)  # still held
    monkeypatch.undo()
    cdi_dir.unlink()
    assert error_of(conn.prepare([a]), a) == ""  # the retry undoes the leftover, then prepares
    assert error_of(conn.unprepare([a]), a) == "" and error_of(conn.prepare([b]), b) == ""


def test_unprepare_of_a_claim_without_a_record_undoes_what_its_spec_records(node: Node) -> None:
    """Unprepare needs only the spec when the record is gone (here: a service that never loaded it)."""
    conn = node.start()
    a = node.claim("a", "gpu-3")
    conn.prepare([a])
    node.stop()
    node.record_file(a).unlink()
    backend = ExampleBackend(BackendSettings(node_name="node-a"))
    service = PrepareService(
        backend, ClaimReader(node.apiserver.json_api()), Checkpoint(node.paths.checkpoint, node.settings.boot_id_path), node.settings.cdi_dir
    )
    try:
        assert service.unprepare([a]) == {a.uid: ""}
    finally:
        service.close()
    assert backend.calls == [("unprepare", {"uid": a.uid, "state": {"uid": a.uid, "devices": ["gpu-3"]}})]
    assert not node.spec(a).exists() and not os.path.lexists(node.record_file(a))


@pytest.mark.parametrize("spec_kind", ["older-build", "not-a-spec", "other-boot"])
def test_spec_without_a_record_that_proves_nothing(node: Node, spec_kind: str) -> None:
    """A spec whose claim data is missing keeps the claim UID reserved until unprepared; a file that is no
    CDI spec is moved where runtimes do not read it; a spec of another boot is removed."""
    conn = node.start()
    a = node.claim("a", "gpu-0")
    conn.prepare([a])
    node.stop()
    spec = node.spec(a)
    if spec_kind == "older-build":  # a spec without its claim file
        Path(cdi.claim_file_path(node.settings.cdi_dir, DRIVER, a.uid)).unlink()
    elif spec_kind == "not-a-spec":
        spec.write_text('{"half": ')
        Path(cdi.claim_file_path(node.settings.cdi_dir, DRIVER, a.uid)).unlink()
    else:
        node.settings.boot_id_path.write_text("boot-2\n")  # a reboot: records and specs of boot-1 are void
    if spec_kind != "other-boot":
        node.record_file(a).unlink()

    conn = node.start()
    if spec_kind == "older-build":
        assert spec.exists() and node.damage_count("cdi-spec") == 1
        assert "does not say which devices" in error_of(conn.prepare([a]), a)
        assert error_of(conn.unprepare([a]), a) == ""
        assert not spec.exists()
    elif spec_kind == "not-a-spec":
        assert not spec.exists() and spec.with_name(f".{spec.name}.corrupt").exists()
        assert error_of(conn.prepare([a]), a) == ""  # nothing proved it prepared: prepared afresh
    else:
        assert not spec.exists() and node.unprepares_of(a) == []


def test_rolling_update_peer_finding_a_damaged_record_keeps_the_reservation(short_tmp: Path, apiserver: Any) -> None:
    """Two instances (rolling-update mode): damage found when one re-reads the other's records is rebuilt
    from the claim's spec at once, so the device is refused to a second claim and the claim unprepares."""
    (short_tmp / "boot_id").write_text("boot-1\n")
    state, cdi_dir = short_tmp / "state", short_tmp / "cdi"

    def instance() -> tuple[PrepareService, ExampleBackend]:
        backend = ExampleBackend(BackendSettings(node_name="node-a"))
        checkpoint = Checkpoint(state / "checkpoint.d", short_tmp / "boot_id")
        return PrepareService(backend, ClaimReader(apiserver.json_api()), checkpoint, cdi_dir, shared_lock=state / "serialize.lock"), backend

    (old, _), (new, new_backend) = instance(), instance()
    try:
        old.recover()
        new.recover()
        stored = [apiserver.store.put(allocated_claim_object(n, "default", DRIVER, "node-a", {"gpu": ["gpu-0"]})) for n in ("x", "y")]
        x, y = (ClaimRef("default", s["metadata"]["name"], s["metadata"]["uid"]) for s in stored)
        assert old.prepare([x])[x.uid].error == ""
        record = state / "checkpoint.d" / f"{x.uid}.json"
        data = record.read_bytes()
        at = data.rindex(b'"phase"') + 1
        record.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :])
        assert x.uid in new.prepare([y])[y.uid].error  # new re-read old's records: damage rebuilt, conflict seen
        assert new.unprepare([x]) == {x.uid: ""}
        assert new_backend.calls[-1] == ("unprepare", {"uid": x.uid, "state": {"uid": x.uid, "devices": ["gpu-0"]}})
        assert old.prepare([y])[y.uid].error == ""  # old sees the release
    finally:
        old.close()
        new.close()


def test_directories_where_lock_files_should_be_do_not_stop_the_driver(short_tmp: Path, apiserver: Any) -> None:
    settings = make_settings(short_tmp, pod_uid="pod-1")
    paths = PluginPaths(settings.kubelet_dir, DRIVER, "pod-1", settings.state_dir)
    stored = apiserver.store.put(allocated_claim_object("a", "default", DRIVER, "node-a", {"gpu": ["gpu-0"]}))
    a = ClaimRef("default", "a", stored["metadata"]["uid"])
    assert paths.serialize_lock is not None and paths.claim_locks_dir is not None
    (paths.serialize_lock / "x").mkdir(parents=True)
    (paths.claim_locks_dir / f"{a.uid}.lock" / "x").mkdir(parents=True)
    daemon = Daemon([ExampleBackend(BackendSettings(node_name="node-a"))], ClaimReader(apiserver.json_api()), settings)
    assert daemon.start().running == [DRIVER]
    try:
        conn = register(paths.registration_socket)
        assert error_of(conn.prepare([a]), a) == "" and error_of(conn.unprepare([a]), a) == ""
        conn.close()
    finally:
        daemon.stop()
