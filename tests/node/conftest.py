"""Fixtures of the node tests: a daemon with the example backend on tmp paths, reading the simulated API server of
tests/conftest.py, and the kubelet client; a boot ID and a checkpoint's records on disk. Tests import `Node`,
`make_settings` and `records_on_disk` from here as tests.node.conftest."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.node.example_backend import DRIVER, ExampleBackend

from dra_driver.node.checkpoint import Checkpoint, ClaimRecord
from dra_driver.node.daemon import Daemon
from dra_driver.simulation import api_server as sim_apiserver
from dra_driver.kube.claims import ClaimReader
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.driver import PluginSettings
from dra_driver.node.plugin.kubelet_client import PluginConnection, register
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import BackendSettings, ClaimRef


@dataclass
class Node:
    """A daemon with the example backend, the API server it reads, and kubelet-side helpers."""

    root: Path
    server: sim_apiserver.SimApiServer
    daemon: Daemon
    backend: ExampleBackend
    settings: PluginSettings

    @property
    def paths(self) -> PluginPaths:
        return paths_of(self.settings)

    @property
    def cdi_dir(self) -> Path:
        return self.settings.cdi_dir

    def connect(self, only: str | None = None) -> PluginConnection:
        return register(self.paths.registration_socket, only=only)

    def add_claim(self, name: str, devices: dict[str, list[str]], namespace: str = "default", config: list[dict[str, Any]] | None = None) -> ClaimRef:
        return put_claim(self.server, name, devices, namespace, config)


def put_claim(
    server: sim_apiserver.SimApiServer,
    name: str,
    devices: dict[str, list[str]],
    namespace: str = "default",
    config: list[dict[str, Any]] | None = None,
) -> ClaimRef:
    """An allocated claim of the example driver on node-a, stored in `server`; `devices`: request name -> its devices."""
    stored = server.store.put(allocated_claim_object(name, namespace, DRIVER, "node-a", devices, config=config))
    return ClaimRef(namespace, name, stored["metadata"]["uid"])


def paths_of(settings: PluginSettings) -> PluginPaths:
    """The example driver's sockets, checkpoint and locks under `settings`."""
    return PluginPaths(settings.kubelet_dir, DRIVER, settings.pod_uid, settings.state_dir)


def make_settings(root: Path, pod_uid: str | None = None) -> PluginSettings:
    """Laid out as deployed: sockets under the kubelet dir, checkpoint and locks under a separate state dir."""
    boot = root / "boot_id"
    if not boot.exists():
        boot.write_text("boot-1\n")
    return PluginSettings(
        node_name="node-a", kubelet_dir=root / "kubelet", cdi_dir=root / "cdi", pod_uid=pod_uid, state_dir=root / "run",
        boot_id_path=boot, prepare_workers=4, grpc_workers=16,
    )  # fmt: skip


@pytest.fixture
def node(short_tmp: Path, apiserver: sim_apiserver.SimApiServer) -> Iterator[Node]:
    settings = make_settings(short_tmp)
    state = short_tmp / "state"
    state.mkdir()
    backend = ExampleBackend(BackendSettings(node_name="node-a", state_dir=state))
    daemon = Daemon([backend], ClaimReader(apiserver.json_api()), settings)
    daemon.start()
    try:
        yield Node(short_tmp, apiserver, daemon, backend, settings)
    finally:
        daemon.stop()


@pytest.fixture
def boot(tmp_path: Path) -> Path:
    """A boot ID file (the kernel's boot_id): a checkpoint's records of another boot are void."""
    path = tmp_path / "boot_id"
    path.write_text("boot-1\n")
    return path


def records_on_disk(path: Path, boot: Path) -> dict[str, ClaimRecord]:
    """A checkpoint directory's records as a restarted process loads them, by claim UID."""
    checkpoint = Checkpoint(path, boot)
    checkpoint.load()
    return {record.uid: record for record in checkpoint.records()}
