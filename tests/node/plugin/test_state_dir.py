"""The state dir: checkpoint and locks apart from the sockets."""

from __future__ import annotations

import os
from pathlib import Path

from tests.node.conftest import make_settings
from tests.node.example_backend import DRIVER, ExampleBackend

from dra_driver.common import atomic_file
from dra_driver.node.daemon import Daemon
from dra_driver.kube.claims import ClaimReader
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import BackendSettings, ClaimRef


def start(settings, apiserver) -> tuple[Daemon, ExampleBackend]:
    backend = ExampleBackend(BackendSettings(node_name="node-a"))
    daemon = Daemon([backend], ClaimReader(apiserver.json_api()), settings)
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
