"""A second DRA driver registered under this driver's name: the daemon stands down; its own other instance does not count."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.node_checks.fake_kubelet import nvidia_daemon, other_driver

from dra_driver.kube import sim_apiserver
from dra_driver.kube.claims import allocated_claim_object
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.backend.interface import ClaimRef

nvidia = pytest.importorskip("dra_driver_nvidia.backend")
DRIVER = "gpu.nvidia.com"


def test_other_registration_stops_publishing_and_refuses_claims(short_tmp: Path):
    with sim_apiserver.SimApiServer() as server, other_driver(short_tmp / "kubelet") as foreign:
        server.add_node("node-a")
        with nvidia_daemon(server, short_tmp, "11111111-1111-1111-1111-111111111111") as daemon:
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
        with nvidia_daemon(server, short_tmp, "11111111-1111-1111-1111-111111111111") as old:
            with nvidia_daemon(server, short_tmp, "22222222-2222-2222-2222-222222222222") as new:
                assert old.conflicts.get(DRIVER) is None and new.conflicts.get(DRIVER) is None
            assert old.conflicts.get(DRIVER) is None
        assert not list((short_tmp / "run" / DRIVER / "registrations").iterdir())  # markers go with their sockets
