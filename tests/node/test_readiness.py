"""Readiness (dra_driver/node/readiness.py): registered with the kubelet, DRA service answering, slices published;
and two daemons on one node during a rolling update (what the DaemonSet's readinessProbe relies on)."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from tests.node.conftest import make_settings
from tests.node.example_backend import DRIVER, ExampleBackend

from tests.hostile_paths import HOSTILE, plant, returns_within

from tests.support import eventually
from dra_driver.node import metrics_http
from dra_driver.api.pluginregistration.v1 import api_pb2 as reg_pb2
from dra_driver.api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from dra_driver.cli.main import main
from dra_driver.node.daemon import Daemon
from dra_driver.kube.claims import ClaimReader
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.kube.client import make_json_api
from dra_driver.simulation.api_server import SimApiServer
from dra_driver.node.metrics_http import BindAddress
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.node.publisher import PublisherOptions
from dra_driver.node.publisher.daemon_adapter import publisher_factory
from dra_driver.node.readiness import ReadinessMonitor, ReadinessReport, liveness_path, read_status, status_path
from dra_driver.backend.interface import BackendSettings, ClaimRef

FAST = PublisherOptions(backoff_initial=0.05, backoff_cap=0.2, debounce=0.01, watch_timeout=30)


@pytest.fixture
def cluster() -> Iterator[SimApiServer]:
    with SimApiServer() as server:
        server.add_node("node-a")
        yield server


def make_daemon(root: Path, api_url: str, pod_uid: str, metrics: BindAddress | None = None) -> Daemon:
    api = make_json_api(api_url)
    settings = make_settings(root, pod_uid=pod_uid)
    backend = ExampleBackend(BackendSettings(node_name="node-a"))
    return Daemon([backend], ClaimReader(api), settings, publisher_factory=publisher_factory(api, "node-a", FAST), metrics_address=metrics)


@pytest.fixture
def ready_daemon(short_tmp: Path, cluster: SimApiServer) -> Iterator[Daemon]:
    """A daemon of pod "pod-a" the kubelet has registered, ready; stopped after the test."""
    daemon = make_daemon(short_tmp, cluster.url, "pod-a")
    daemon.start()
    try:
        register(daemon.plugins[DRIVER].paths.registration_socket).close()
        eventually(lambda: daemon.readiness.check().ready, what=str(problems(daemon)))
        yield daemon
    finally:
        daemon.stop()


def problems(daemon: Daemon) -> list[str]:
    return daemon.readiness.check().problems.get(DRIVER, [])


def probe(root: Path, pod_uid: str) -> int:
    """The exec readinessProbe, as the kubelet runs it in the pod."""
    return main(["ready", "--state-dir", str(root / "run"), "--pod-uid", pod_uid])


def slice_owners(server: SimApiServer) -> int:
    return len([o for o in server.store.list("resourceslices") if o["spec"]["driver"] == DRIVER])


def test_not_ready_until_the_kubelet_registers_then_ready_with_slices_published(short_tmp: Path, cluster: SimApiServer) -> None:
    daemon = make_daemon(short_tmp, cluster.url, "pod-a")
    daemon.start()
    try:
        assert any("not registered with the kubelet yet" in p for p in problems(daemon))
        daemon.readiness.check_and_record()
        assert probe(short_tmp, "pod-a") == 1
        conn = register(daemon.plugins[DRIVER].paths.registration_socket)
        eventually(lambda: daemon.readiness.check().ready, what=str(problems(daemon)))
        assert slice_owners(cluster) >= 1
        daemon.readiness.check_and_record()
        assert probe(short_tmp, "pod-a") == 0
        # The exec probe and the status of another pod on the same node are different files.
        assert probe(short_tmp, "pod-b") == 1
        conn.close()
    finally:
        daemon.stop()
    assert not status_path(short_tmp / "run", "pod-a").exists(), "a stopped daemon left a status saying ready"
    assert probe(short_tmp, "pod-a") == 1


def test_not_ready_while_slices_are_not_published(short_tmp: Path) -> None:
    """An API server that never answers: registered and serving, but not ready (the slices are what the scheduler needs)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"  # nothing listens once the probe socket is closed
    daemon = make_daemon(short_tmp, url, "pod-a")
    daemon.start()
    try:
        conn = register(daemon.plugins[DRIVER].paths.registration_socket)
        assert problems(daemon) == ["slices not published yet"]
        conn.close()
    finally:
        daemon.stop()


def test_kubelet_refusing_the_registration_makes_it_unready(ready_daemon: Daemon) -> None:
    socket_path = ready_daemon.plugins[DRIVER].paths.registration_socket
    with grpc.insecure_channel(f"unix://{socket_path}") as channel:
        with pytest.raises(grpc.RpcError):  # the plugin answers a refusal with an error, as the reference helper does
            reg_grpc.RegistrationStub(channel).NotifyRegistrationStatus(
                reg_pb2.RegistrationStatus(plugin_registered=False, error="version skew"), timeout=5
            )
    assert any("refused the registration: version skew" in p for p in problems(ready_daemon))
    register(socket_path).close()  # the kubelet retries, and succeeds
    assert ready_daemon.readiness.check().ready


def test_lost_registration_socket_is_unready_and_served_again(ready_daemon: Daemon, cluster: SimApiServer) -> None:
    paths = ready_daemon.plugins[DRIVER].paths
    ready_daemon.readiness.stop()  # a monitor driven by hand from here
    monitor = ReadinessMonitor(lambda: ready_daemon.plugins, lambda: True, None)
    paths.registration_socket.unlink()  # what the kubelet sees as deregistration
    assert any("is gone" in p for p in problems(ready_daemon))
    report = monitor.check_and_record()  # reports unready, then serves the socket again
    assert not report.ready and paths.registration_socket.is_socket()
    assert problems(ready_daemon) == ["not registered with the kubelet yet"], "a new socket needs a new registration"
    conn = register(paths.registration_socket)  # the kubelet's plugin watcher sees the new socket
    assert monitor.check().ready
    ref = ClaimRef("default", "c", cluster.store.put(allocated_claim_object("c", "default", DRIVER, "node-a", {"gpu": ["gpu-0"]}))["metadata"]["uid"])
    assert conn.prepare([ref]).claims[ref.uid].error == ""
    conn.close()


def test_dra_socket_that_does_not_answer_is_unready(ready_daemon: Daemon) -> None:
    ready_daemon.plugins[DRIVER]._stop_dra()  # the DRA server gone while registration still answers
    assert any("does not answer" in p for p in problems(ready_daemon))


def test_dra_socket_check_opens_no_grpc_channel(ready_daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check every 2 s is a plain HTTP/2 handshake: a gRPC channel per check started and stopped threads beside the
    claim calls (docs/performance.md, "Under the real kubelet")."""
    monkeypatch.setitem(sys.modules, "grpc", None)  # any `import grpc` now fails
    assert problems(ready_daemon) == []


@pytest.mark.parametrize(
    "answer", [b"", b"HTTP/1.1 400 Bad Request\r\n\r\n", b"\x00\x00\x00\x04\x01\x00\x00\x00\x00"], ids=["silent", "http1", "settings-ack"]
)
def test_dra_socket_whose_listener_is_not_a_grpc_server_is_unready(ready_daemon: Daemon, answer: bytes) -> None:
    """A listener that accepts but does not open with HTTP/2 SETTINGS (silent, another protocol, an ACK) does not answer."""
    plugin = ready_daemon.plugins[DRIVER]
    plugin._stop_dra()
    plugin.paths.dra_socket.unlink(missing_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(plugin.paths.dra_socket))
        listener.listen(4)
        stop = threading.Event()

        def serve() -> None:
            listener.settimeout(0.1)
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except OSError:
                    continue
                with conn:
                    if answer:
                        conn.sendall(answer)
                    stop.wait(2)

        server = threading.Thread(target=serve, daemon=True)
        server.start()
        try:
            found = returns_within(lambda: problems(ready_daemon), plugin.paths.dra_socket)
            assert any("does not answer" in p for p in found), found
        finally:
            stop.set()
            server.join(5)


@contextmanager
def live_daemon_lock(status: Path) -> Iterator[None]:
    """What a running daemon holds beside its status file (the flock `dra-driver ready` looks for)."""
    status.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(liveness_path(status), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def test_status_file_that_is_stale_damaged_or_missing_is_not_ready(short_tmp: Path) -> None:
    path = status_path(short_tmp, "pod-a")
    assert not read_status(path, 15).ready
    path.parent.mkdir(parents=True)
    with live_daemon_lock(path):
        for damaged in ("{not json", "[" * 200_000 + "]" * 200_000):  # the second nests past json's recursion limit
            path.write_text(damaged)
            assert "unreadable" in read_status(path, 15).summary()
        path.write_text(ReadinessReport(True, {}, checked_at=1000.0, heartbeat=500.0).to_json())
        assert read_status(path, 15, now=510.0).ready
        stale = read_status(path, 15, now=600.0)
        assert not stale.ready and "100 s old" in stale.summary()
        path.write_text(json.dumps({"ready": "yes", "heartbeat": 500.0}))
        assert not read_status(path, 15, now=501.0).ready


@pytest.mark.parametrize("heartbeat", ["1e308", "NaN", "Infinity", "-Infinity", "null", "true", '"500"', "600.5"])
def test_a_heartbeat_that_is_not_a_finite_past_number_is_not_ready(short_tmp: Path, heartbeat: str) -> None:
    """Written by hand, a damaged file or a clock it did not come from: never ready, even with a live lock holder."""
    path = status_path(short_tmp, "pod-a")
    with live_daemon_lock(path):
        path.write_text(f'{{"ready": true, "problems": {{}}, "checkedAt": 1000.0, "heartbeat": {heartbeat}}}')
        report = read_status(path, 15, now=510.0)
        assert not report.ready and "heartbeat" in report.summary()


@pytest.mark.parametrize("checked_at", ["1e308", "NaN", "FUTURE", "NOW"])
def test_ready_never_exits_0_when_no_daemon_runs_whatever_the_file_says(short_tmp: Path, checked_at: str) -> None:
    """Before the liveness lock, a checkedAt in the future, NaN or 1e308 (or a backward clock step) made a file
    left by a dead daemon say ready for ever."""
    path = status_path(short_tmp / "run", "pod-a")
    path.parent.mkdir(parents=True)
    value = {"FUTURE": str(time.time() + 3600), "NOW": str(time.time())}.get(checked_at, checked_at)
    path.write_text(f'{{"ready": true, "problems": {{}}, "checkedAt": {value}, "heartbeat": {time.monotonic()}}}')
    assert probe(short_tmp, "pod-a") == 1
    liveness_path(path).touch()  # the lock file of a daemon that died: nobody holds it
    assert probe(short_tmp, "pod-a") == 1


def test_a_killed_daemon_is_unready_at_once(short_tmp: Path, apiserver: SimApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    """A real daemon process, registered and ready, then kill -9: the next probe says not ready (the status file it
    left still holds a fresh heartbeat; before the liveness lock the probe said ready for 15 s more)."""
    from tests.node.plugin.crash_support import registers, start_daemon

    (short_tmp / "state").mkdir()
    daemon = start_daemon(apiserver.url, short_tmp)
    try:
        paths = PluginPaths(short_tmp / "kubelet", DRIVER, None, short_tmp / "run")
        eventually(lambda: registers(paths), what="the daemon registers")
        state = ["ready", "--state-dir", str(short_tmp / "run")]
        eventually(lambda: main(state) == 0, what="the daemon is ready", step=0.1)
    finally:
        daemon.kill()
        daemon.wait()
    assert status_path(short_tmp / "run", None).exists()  # left behind by kill -9
    capsys.readouterr()
    assert main(state) == 1
    assert "no daemon is running: nobody holds" in capsys.readouterr().err


def test_readyz_is_unready_when_the_monitor_stopped_checking(ready_daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    ready_daemon.readiness.check_and_record()
    assert ready_daemon._readyz().status == 200
    later = time.monotonic() + 60  # the monitor thread hung for a minute
    monkeypatch.setattr(time, "monotonic", lambda: later)
    answer = ready_daemon._readyz()
    assert answer.status == 503 and b"the daemon stopped checking" in answer.body


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_pipe_or_link_at_the_status_file_is_not_ready_at_once(short_tmp: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    """`dra-driver ready` is the exec probe: a FIFO there hung it until the kubelet killed it, and a link to
    /dev/zero was read until MemoryError. Both are a prompt not-ready naming the path."""
    path = status_path(short_tmp, "pod-a")
    plant(path, kind)
    code = returns_within(lambda: main(["ready", "--state-dir", str(short_tmp), "--pod-uid", "pod-a"]), path)
    assert code == 1
    err = capsys.readouterr().err
    assert f"readiness status {path} unreadable: {path}: is " in err and "remove it" in err


def test_rolling_update_two_daemons_on_one_node(short_tmp: Path, cluster: SimApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The surge pod starts beside the old one (same kubelet, state and CDI dirs; host networking, so the same
    metrics address): it gets its own sockets and status file, is not ready until the kubelet registers it, is
    ready while the old pod still publishes the slices, and takes over publishing and the metrics port after."""
    monkeypatch.setattr(metrics_http, "DEFAULT_BIND_RETRY_S", 0.1)
    with socket.socket() as probe_port:
        probe_port.bind(("127.0.0.1", 0))
        port = probe_port.getsockname()[1]
    address = BindAddress("127.0.0.1", port)
    old = make_daemon(short_tmp, cluster.url, "pod-old", address)
    new = make_daemon(short_tmp, cluster.url, "pod-new", address)
    old.start()
    try:
        register(old.plugins[DRIVER].paths.registration_socket).close()
        eventually(lambda: old.readiness.check().ready)
        assert new.start().running == [DRIVER]  # the busy metrics port does not stop it
        old_paths, new_paths = (PluginPaths(d.settings.kubelet_dir, DRIVER, d.settings.pod_uid, d.settings.state_dir) for d in (old, new))
        assert old_paths.registration_socket != new_paths.registration_socket and old_paths.dra_socket != new_paths.dra_socket
        assert old_paths.registration_socket.is_socket() and new_paths.registration_socket.is_socket()
        assert old.readiness.status_file != new.readiness.status_file
        assert problems(new) == ["not registered with the kubelet yet"]
        conn = register(new_paths.registration_socket)
        eventually(lambda: new.readiness.check().ready, what=str(problems(new)))  # the old pod holds the lease and publishes
        assert new.metrics_endpoint is not None and not new.metrics_endpoint.wait_bound(0)
        for daemon, uid in ((old, "pod-old"), (new, "pod-new")):
            daemon.readiness.check_and_record()
            assert probe(short_tmp, uid) == 0
        before = slice_owners(cluster)
    finally:
        old.stop()  # the DaemonSet controller deletes the old pod once the new one is ready (minReadySeconds)
    try:
        assert old_paths.registration_socket.exists() is False and new_paths.registration_socket.is_socket()
        assert new.metrics_endpoint.wait_bound(5), "the new pod never took the metrics port over"
        ref = ClaimRef(
            "default", "c", cluster.store.put(allocated_claim_object("c", "default", DRIVER, "node-a", {"gpu": ["gpu-1"]}))["metadata"]["uid"]
        )
        assert conn.prepare([ref]).claims[ref.uid].error == ""
        lease = new.plugins[DRIVER].publisher
        assert lease is not None
        eventually(lambda: lease.publishing.is_set(), what="the new pod took the publisher lease over")
        eventually(lambda: new.readiness.check().ready)
        assert slice_owners(cluster) == before
        conn.close()
    finally:
        new.stop()


def test_not_ready_while_start_up_recovery_runs_or_after_it_failed(tmp_path: Path) -> None:
    """A driver whose DRA socket answers but whose claim calls would wait for (or be refused after) recovery is not ready."""
    from types import SimpleNamespace

    from dra_driver.node.plugin.recovery import RecoveryGate
    from dra_driver.node.readiness import driver_problems

    gate = RecoveryGate()
    service = SimpleNamespace(recovery_problem=gate.problem)
    paths = SimpleNamespace(registration_socket=tmp_path / "missing-reg.sock", dra_socket=tmp_path / "missing-dra.sock")
    plugin = SimpleNamespace(registration=SimpleNamespace(status=None), paths=paths, publisher=None, service=service)
    assert any("still reading the checkpoint" in p for p in driver_problems(plugin, api_connected=True))  # type: ignore[arg-type]
    gate.fail("OSError: disk")
    assert any("recovery failed (OSError: disk)" in p for p in driver_problems(plugin, api_connected=True))  # type: ignore[arg-type]
    opened = RecoveryGate()
    opened.open()
    service.recovery_problem = opened.problem
    assert not any("recovery" in p for p in driver_problems(plugin, api_connected=True))  # type: ignore[arg-type]
