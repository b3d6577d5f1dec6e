"""A second DRA driver registered under this driver's name: the daemon stands down; its own other instance does not count."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fake_kubelet import node_settings

from dra_driver.api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from dra_driver.daemon import Daemon
from dra_driver.hardware_profiles import load_profile
from dra_driver.kube import sim_apiserver
from dra_driver.kube.claims import ClaimReader, allocated_claim_object
from dra_driver.node_checks.same_name import ConflictBoard
from dra_driver.plugin.kubelet_client import register
from dra_driver.plugin.registration import RegistrationServicer
from dra_driver.plugin.sockets import UnixServer
from dra_driver.publisher.daemon_adapter import publisher_factory
from dra_driver.vendor import BackendSettings, ClaimRef

nvidia = pytest.importorskip("dra_driver_nvidia.backend")
DRIVER = "gpu.nvidia.com"


@contextmanager
def other_driver(kubelet_dir: Path) -> Iterator[Path]:
    """The vendor's own driver: registered with the helper's default socket name, serving its own endpoint."""
    socket = kubelet_dir / "plugins_registry" / f"{DRIVER}-reg.sock"
    servicer = RegistrationServicer(DRIVER, str(kubelet_dir / "plugins" / DRIVER / "dra.sock"))
    server = UnixServer(socket, lambda s: reg_grpc.add_RegistrationServicer_to_server(servicer, s), 2, "other")
    server.start()
    try:
        yield socket
    finally:
        server.stop()


@contextmanager
def daemon_on(server: sim_apiserver.SimApiServer, root: Path, pod_uid: str) -> Iterator[Daemon]:
    settings = dataclasses.replace(node_settings(root), pod_uid=pod_uid)
    backend = nvidia.NvidiaBackend.from_profile(load_profile("dgx-h100").sections["nvidia"], BackendSettings(node_name="node-a"))
    api = server.api_client()
    conflicts = ConflictBoard()  # shared by the daemon and its publishers, as `run` wires them
    daemon = Daemon([backend], ClaimReader(api), settings, publisher_factory=publisher_factory(api, "node-a", conflicts=conflicts), conflicts=conflicts)
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.stop()
        backend.close()


def test_other_registration_stops_publishing_and_refuses_claims(short_tmp: Path):
    with sim_apiserver.SimApiServer() as server, other_driver(short_tmp / "kubelet") as foreign:
        server.add_node("node-a")
        with daemon_on(server, short_tmp, "11111111-1111-1111-1111-111111111111") as daemon:
            conflict = daemon.conflicts.get(DRIVER)
            assert conflict is not None and str(foreign) in conflict and "stopped publishing" in conflict
            publisher = daemon.plugins[DRIVER].publisher
            assert publisher is not None and publisher.inner.publisher.wait_synced(timeout=10)
            assert server.objects("ResourceSlice") == []
            stored = server.store.put(allocated_claim_object("c", "default", DRIVER, "node-a", {"gpu": ["gpu-1"]}))
            ref = ClaimRef("default", "c", stored["metadata"]["uid"])
            conn = register(daemon.plugins[DRIVER].paths.registration_socket)
            assert "another DRA driver named gpu.nvidia.com" in conn.prepare([ref]).claims[ref.uid].error
            conn.close()
            assert daemon.metrics.registry.get_sample_value("dra_driver_errors_total", {"driver": DRIVER, "operation": "same-name-driver"}) == 1


def test_this_drivers_other_instance_is_not_a_stranger(short_tmp: Path):
    """A rolling update: two instances with per-pod sockets and one state dir; neither stands down."""
    with sim_apiserver.SimApiServer() as server:
        server.add_node("node-a")
        with daemon_on(server, short_tmp, "11111111-1111-1111-1111-111111111111") as old:
            with daemon_on(server, short_tmp, "22222222-2222-2222-2222-222222222222") as new:
                assert old.conflicts.get(DRIVER) is None and new.conflicts.get(DRIVER) is None
            assert old.conflicts.get(DRIVER) is None
        assert not list((short_tmp / "run" / DRIVER / "registrations").iterdir())  # markers go with their sockets
