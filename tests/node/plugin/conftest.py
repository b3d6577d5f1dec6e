"""Fixtures: the simulated API server (real HTTP, real kubernetes client), a daemon on tmp paths, the kubelet client."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from example_backend import DRIVER, ExampleBackend  # noqa: E402

from dra_driver.node.daemon import Daemon  # noqa: E402
from dra_driver.simulation import api_server as sim_apiserver  # noqa: E402
from dra_driver.kube.claims import ClaimReader  # noqa: E402
from dra_driver.simulation.claims import allocated_claim_object  # noqa: E402
from dra_driver.node.plugin.driver import PluginSettings  # noqa: E402
from dra_driver.node.plugin.kubelet_client import PluginConnection, register  # noqa: E402
from dra_driver.node.plugin.sockets import PluginPaths  # noqa: E402
from dra_driver.backend.interface import BackendSettings, ClaimRef  # noqa: E402



@pytest.fixture
def apiserver() -> Iterator[sim_apiserver.SimApiServer]:
    with sim_apiserver.SimApiServer() as server:
        yield server


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
        return PluginPaths(self.settings.kubelet_dir, DRIVER, self.settings.pod_uid, self.settings.state_dir)

    @property
    def cdi_dir(self) -> Path:
        return self.settings.cdi_dir

    def connect(self, only: str | None = None) -> PluginConnection:
        return register(self.paths.registration_socket, only=only)

    def add_claim(self, name: str, devices: dict[str, list[str]], namespace: str = "default", config: list[dict[str, Any]] | None = None) -> ClaimRef:
        stored = self.server.store.put(allocated_claim_object(name, namespace, DRIVER, "node-a", devices, config=config))
        return ClaimRef(namespace, name, stored["metadata"]["uid"])


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
