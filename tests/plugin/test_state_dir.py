"""The state dir: checkpoint and locks apart from the sockets, and records moved there from the old place."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from conftest import make_settings
from example_backend import DRIVER, ExampleBackend

from dra_driver.common import atomic_file
from dra_driver.node.checkpoint import PREPARE_COMPLETED, Checkpoint, CheckpointDevice, ClaimRecord
from dra_driver.node.daemon import Daemon
from dra_driver.kube.claims import ClaimReader
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import BackendSettings, ClaimRef


def start(settings, apiserver) -> tuple[Daemon, ExampleBackend]:
    backend = ExampleBackend(BackendSettings(node_name="node-a"))
    daemon = Daemon([backend], ClaimReader(apiserver.api_client()), settings)
    assert daemon.start().running == [DRIVER]
    return daemon, backend


def test_state_lives_under_the_state_dir_and_sockets_under_the_kubelet_dir(short_tmp: Path, apiserver) -> None:
    settings = make_settings(short_tmp, pod_uid="pod-1")
    daemon, _ = start(settings, apiserver)
    try:
        paths = PluginPaths(settings.kubelet_dir, DRIVER, "pod-1", settings.state_dir)
        stored = apiserver.store.put(allocated_claim_object("a", "default", DRIVER, "node-a", {"gpu": ["gpu-0"]}))
        ref = ClaimRef("default", "a", stored["metadata"]["uid"])
        conn = register(paths.registration_socket)
        assert conn.prepare([ref]).claims[ref.uid].error == ""
        assert (settings.state_dir / DRIVER / "checkpoint.d" / f"{ref.uid}.json").exists()
        assert paths.dra_socket.parent == settings.kubelet_dir / "plugins" / DRIVER
        assert sorted(p.name for p in paths.plugin_dir.iterdir()) == [paths.dra_socket.name]  # nothing but the socket
        conn.close()
    finally:
        daemon.stop()


def test_records_prepared_beside_the_socket_are_moved_and_still_unprepared(short_tmp: Path, apiserver) -> None:
    """An instance of a build without a state dir prepared a claim; the new one takes it over."""
    old_settings = dataclasses.replace(make_settings(short_tmp), state_dir=None)
    daemon, _ = start(old_settings, apiserver)
    stored = apiserver.store.put(allocated_claim_object("a", "default", DRIVER, "node-a", {"gpu": ["gpu-3"]}))
    ref = ClaimRef("default", "a", stored["metadata"]["uid"])
    paths = PluginPaths(old_settings.kubelet_dir, DRIVER)
    conn = register(paths.registration_socket)
    answer = conn.prepare([ref]).claims[ref.uid]
    assert answer.error == ""
    conn.close()
    daemon.stop()
    old_record = paths.plugin_dir / "checkpoint.d" / f"{ref.uid}.json"
    assert old_record.exists()
    spec = next(old_settings.cdi_dir.glob(f"k8s.*{ref.uid}.json"))

    new_settings = make_settings(short_tmp)
    daemon, backend = start(new_settings, apiserver)
    try:
        assert not old_record.exists() and not old_record.parent.exists()
        assert (new_settings.state_dir / DRIVER / "checkpoint.d" / f"{ref.uid}.json").exists()
        assert spec.exists()  # the claim is known: its spec is not an orphan
        conn = register(paths.registration_socket)
        again = conn.prepare([ref]).claims[ref.uid]  # answered from the moved record, backend untouched
        assert [list(d.cdi_device_ids) for d in again.devices] == [list(d.cdi_device_ids) for d in answer.devices]
        assert "prepare" not in [op for op, _ in backend.calls]
        assert conn.unprepare([ref]).claims[ref.uid].error == ""
        assert [op for op, _ in backend.calls].count("unprepare") == 1 and not spec.exists()
        conn.close()
    finally:
        daemon.stop()


def test_a_record_already_in_the_new_place_wins(tmp_path: Path) -> None:
    boot = tmp_path / "boot_id"
    boot.write_text("b1\n")
    earlier, current = tmp_path / "old", tmp_path / "new"
    device = [CheckpointDevice("gpu", "pool", "gpu-0")]
    Checkpoint(earlier, boot).put(ClaimRecord("u1", "ns", "stale", PREPARE_COMPLETED, device))
    Checkpoint(earlier, boot).put(ClaimRecord("u2", "ns", "only-old", PREPARE_COMPLETED, device))
    Checkpoint(current, boot).put(ClaimRecord("u1", "ns", "newer", PREPARE_COMPLETED, device))
    moved = Checkpoint(current, boot, moved_from=earlier)
    moved.load()
    assert {r.uid: r.name for r in moved.records()} == {"u1": "newer", "u2": "only-old"}
    assert not earlier.exists()


def test_leftover_temp_files_anywhere_under_the_state_dir_are_removed_at_start(short_tmp: Path, apiserver) -> None:
    """A kill -9 mid-write leaves `.<name>.<random>.tmp` in whichever directory was being written (a sharing
    record here); start-up removes them all, but never a temp a live writer (another instance) still holds."""
    settings = make_settings(short_tmp, pod_uid="pod-1")
    sharing = settings.state_dir / "nvidia" / "sharing"
    sharing.mkdir(parents=True)
    killed = [sharing / ".uid-1.json.0123456789ab.tmp", settings.state_dir / "ready" / ".pod-0.json.0123456789ab.tmp"]
    for path in killed:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"a": "full record"}')
    fd, live = atomic_file.create_temp(str(sharing / "uid-2.json"))  # a peer's write under way
    try:
        daemon, _ = start(settings, apiserver)
        daemon.stop()
        assert [p for p in killed if p.exists()] == [] and Path(live).exists()
    finally:
        os.close(fd)
    assert atomic_file.remove_leftovers(settings.state_dir) == [Path(live)]  # its writer gone: a leftover now
