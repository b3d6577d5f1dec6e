"""A second DRA driver registered under this driver's name: the daemon stands down; its own other instance does not count."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.node.checks.fake_kubelet import nvidia_daemon, other_driver

from tests.support import eventually
from dra_driver.cli.main import main
from dra_driver.simulation import api_server as sim_apiserver
from dra_driver.node.daemon import Daemon
from dra_driver.simulation.claims import allocated_claim_object
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


OLD, NEW = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
FAST = 0.05  # the recheck interval, injected: no test sleeps for the default


def prepare(daemon: Daemon, server: sim_apiserver.SimApiServer, name: str, device: str) -> str:
    stored = server.store.put(allocated_claim_object(name, "default", DRIVER, "node-a", {"gpu": [device]}))
    ref = ClaimRef("default", name, stored["metadata"]["uid"])
    conn = register(daemon.plugins[DRIVER].paths.registration_socket)
    try:
        return conn.prepare([ref]).claims[ref.uid].error
    finally:
        conn.close()


def test_an_upgrade_from_an_instance_without_a_marker_never_stands_down(short_tmp: Path):
    """The old pod wrote no registrations/ marker (a full disk, a wiped directory): before, the new pod
    took the old pod's socket for a foreign same-name driver, withdrew its slices and refused every claim once the old
    pod stopped. Its live instance record on the shared state directory names the socket as ours."""
    with sim_apiserver.SimApiServer() as server:
        server.add_node("node-a")
        markers = short_tmp / "run" / DRIVER / "registrations"
        with nvidia_daemon(server, short_tmp, OLD, recheck_interval=FAST) as old:
            for marker in markers.iterdir():
                marker.unlink()  # as if never written
            with nvidia_daemon(server, short_tmp, NEW, recheck_interval=FAST) as new:
                assert new.conflicts.get(DRIVER) is None
                for marker in markers.iterdir():
                    marker.unlink()  # the new pod's marker lost too: the old pod's rechecks must not stand it down
                new.recheck()
                old.recheck()
                time.sleep(FAST * 4)  # a few rounds of the background rechecks too
                assert old.conflicts.get(DRIVER) is None and new.conflicts.get(DRIVER) is None
                old.stop()  # the DaemonSet deletes the old pod
                assert prepare(new, server, "after-upgrade", "gpu-1") == ""
                eventually(lambda: len(server.objects("ResourceSlice")) > 0, "the new pod publishes the slices")


def test_a_same_name_conflict_is_checked_again_and_clears_without_a_restart(short_tmp: Path, capsys: pytest.CaptureFixture[str]):
    """Before, the conflict was decided once at start: claims stayed refused after the other driver was gone."""
    with sim_apiserver.SimApiServer() as server:
        server.add_node("node-a")
        with other_driver(short_tmp / "kubelet") as foreign:
            with nvidia_daemon(server, short_tmp, OLD, recheck_interval=FAST) as daemon:
                register(daemon.plugins[DRIVER].paths.registration_socket).close()  # the kubelet registered it
                assert "another DRA driver named gpu.nvidia.com" in prepare(daemon, server, "during", "gpu-0")
                report = daemon.readiness.check_and_record()
                assert not report.ready and f"standing down: another DRA driver named {DRIVER}" in report.summary()
                capsys.readouterr()
                assert main(["ready", "--state-dir", str(short_tmp / "run"), "--pod-uid", OLD]) == 1
                assert "standing down: another DRA driver" in capsys.readouterr().err
                readyz = daemon._readyz()
                assert readyz.status == 503 and b"standing down" in readyz.body
                foreign.unlink()  # its socket removed: the kubelet has deregistered it
                eventually(lambda: daemon.conflicts.get(DRIVER) is None, "the conflict clears")
                assert prepare(daemon, server, "after", "gpu-1") == ""


def test_the_other_driver_leaving_lets_a_running_driver_serve_again(short_tmp: Path):
    with sim_apiserver.SimApiServer() as server:
        server.add_node("node-a")
        foreign = other_driver(short_tmp / "kubelet")
        foreign.__enter__()
        try:
            with nvidia_daemon(server, short_tmp, OLD, recheck_interval=FAST) as daemon:
                assert daemon.conflicts.get(DRIVER) is not None
                register(daemon.plugins[DRIVER].paths.registration_socket).close()
                foreign.__exit__(None, None, None)  # the vendor's driver is uninstalled: its socket goes with it
                foreign = None
                eventually(lambda: daemon.conflicts.get(DRIVER) is None, "the conflict clears")
                assert prepare(daemon, server, "after", "gpu-2") == ""
                eventually(lambda: len(server.objects("ResourceSlice")) > 0, "slices published again")
                eventually(lambda: daemon.readiness.check().ready, "ready again")
                with other_driver(short_tmp / "kubelet"):  # and a driver arriving later is found too
                    eventually(lambda: daemon.conflicts.get(DRIVER) is not None, "the new conflict is found")
                    assert "another DRA driver" in prepare(daemon, server, "again", "gpu-3")
                    eventually(lambda: server.objects("ResourceSlice") == [], "own slices withdrawn")
        finally:
            if foreign is not None:
                foreign.__exit__(None, None, None)
