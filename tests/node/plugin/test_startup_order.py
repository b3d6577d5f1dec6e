"""Start-up for the kubelet's clock: sockets serve before the API client exists, prepares in the gap wait for it.

The daemon built by `dra-driver run` gets a `connect` callable instead of a ready
claim source; it must be called only once the registration socket answers, and a
NodePrepareResources sent before it returns must wait and then succeed (or fail
with the reason when connecting fails), never fail for lack of a client.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tests.node.conftest import make_settings, put_claim
from tests.node.example_backend import DRIVER, ExampleBackend

from dra_driver.node.daemon import ApiWiring, Daemon
from dra_driver.common.errors import DraError
from dra_driver.kube.claims import ClaimReader
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.pending_claims import ClientNotReady, PendingClaims
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import BackendSettings, HealthEvent


def test_connect_runs_after_registration_and_a_prepare_in_the_gap_waits(short_tmp: Path, apiserver) -> None:
    settings = make_settings(short_tmp)
    paths = PluginPaths(settings.kubelet_dir.absolute(), DRIVER, state_dir=settings.state_dir)
    claim = put_claim(apiserver, "early", {"gpu": ["gpu-0"]})
    in_connect, release = threading.Event(), threading.Event()
    answers: list[object] = []

    def connect() -> ApiWiring:
        assert paths.registration_socket.exists(), "the API client was built before the driver registered"
        # The kubelet registers and prepares now, while the client is still "being built".
        conn = register(paths.registration_socket)
        pool = ThreadPoolExecutor(1)
        pending = pool.submit(conn.prepare, [claim])
        in_connect.set()
        time.sleep(0.2)
        assert not pending.done(), "the prepare did not wait for the API client"
        release.set()
        answers.append((pool, pending, conn))
        return ApiWiring(claims=ClaimReader(apiserver.json_api()))

    daemon = Daemon([ExampleBackend(BackendSettings(node_name="node-a"))], None, settings, connect=connect)
    try:
        assert daemon.start().running == [DRIVER]
        pool, pending, conn = answers[0]
        response = pending.result(timeout=30)
        assert response.claims[claim.uid].error == ""
        assert [d.device_name for d in response.claims[claim.uid].devices] == ["gpu-0"]
        conn.close()
        pool.shutdown()
    finally:
        daemon.stop()


def test_failing_connect_fails_waiting_prepares_with_the_reason_and_deregisters(short_tmp: Path, apiserver) -> None:
    settings = make_settings(short_tmp)
    paths = PluginPaths(settings.kubelet_dir.absolute(), DRIVER, state_dir=settings.state_dir)
    claim = put_claim(apiserver, "early", {"gpu": ["gpu-0"]})
    waiting: list[object] = []

    def connect() -> ApiWiring:
        conn = register(paths.registration_socket)
        waiting.append((conn, ThreadPoolExecutor(1).submit(conn.prepare, [claim])))
        time.sleep(0.1)
        raise DraError("kubeconfig /etc/kube/config: no current context")

    daemon = Daemon([ExampleBackend(BackendSettings(node_name="node-a"))], None, settings, connect=connect)
    with pytest.raises(DraError, match="no current context"):
        daemon.start()
    conn, pending = waiting[0]
    error = pending.result(timeout=30).claims[claim.uid].error
    assert "API client could not be built" in error and "no current context" in error
    conn.close()
    assert not paths.registration_socket.exists() and not paths.dra_socket.exists()  # start() cleaned up itself
    daemon.stop()  # and stopping again is harmless


def test_publisher_attached_after_start_gets_the_health_seen_before(short_tmp: Path, apiserver) -> None:
    """A device that turned unhealthy before the publisher existed is still tainted by it."""
    settings = make_settings(short_tmp)
    events: list[HealthEvent] = []

    class Recording:
        def start(self) -> None:
            pass

        def stop(self) -> None:
            pass

        def set_device_health(self, event: HealthEvent) -> None:
            events.append(event)

    daemons: list[Daemon] = []

    def connect() -> ApiWiring:
        daemons[0].plugins[DRIVER].on_health_event(HealthEvent(device="gpu-3", healthy=False, reason="xid 79"))
        return ApiWiring(claims=ClaimReader(apiserver.json_api()), publisher_factory=lambda backend, inventory: Recording())

    daemons.append(Daemon([ExampleBackend(BackendSettings(node_name="node-a"))], None, settings, connect=connect))
    try:
        assert daemons[0].start().running == [DRIVER]
        assert [(e.device, e.healthy) for e in events] == [("gpu-3", False)]
        daemons[0].plugins[DRIVER].on_health_event(HealthEvent(device="gpu-3", healthy=True, reason="recovered"))
        assert [(e.device, e.healthy) for e in events] == [("gpu-3", False), ("gpu-3", True)]
    finally:
        daemons[0].stop()


def test_daemon_needs_exactly_one_of_claims_and_connect(short_tmp: Path) -> None:
    backend = ExampleBackend(BackendSettings(node_name="node-a"))
    with pytest.raises(ValueError, match="exactly one"):
        Daemon([backend], None, make_settings(short_tmp))


class _Source:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def get(self, namespace: str, name: str, uid: str = "", deadline: float | None = None) -> object:
        self.calls.append((namespace, name, uid))
        return "claim"


def test_pending_claims_wait_for_the_source_then_forward() -> None:
    pending = PendingClaims(wait_s=10)
    source = _Source()
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(pending.get, "ns", "c", "uid-1")
        time.sleep(0.05)
        assert not answer.done()
        pending.ready(source)  # type: ignore[arg-type]
        assert answer.result(timeout=5) == "claim"
    pending.fail("too late")  # ignored once ready
    assert pending.get("ns", "d") == "claim"  # type: ignore[comparison-overlap]
    assert source.calls == [("ns", "c", "uid-1"), ("ns", "d", "")]


def test_pending_claims_fail_with_the_problem_or_after_the_wait() -> None:
    failed = PendingClaims(wait_s=10)
    failed.fail("the API client could not be built: bad token file")
    failed.ready(_Source())  # type: ignore[arg-type]  # ignored once failed
    with pytest.raises(ClientNotReady, match="ResourceClaim ns/c: the API client could not be built: bad token file"):
        failed.get("ns", "c")
    with pytest.raises(ClientNotReady, match="not ready after 0 s"):
        PendingClaims(wait_s=0.01).get("ns", "c")
    with pytest.raises(ClientNotReady, match="not ready after 0 s"):  # the kubelet's deadline comes first, not the 30 s wait
        PendingClaims(wait_s=30).get("ns", "c", deadline=time.monotonic() + 0.05)


def test_serving_the_sockets_imports_neither_the_kubernetes_client_nor_prometheus() -> None:
    """What `dra-driver run` imports before registration: the API client, its HTTP stack, the claim models
    and prometheus_client cost most of a cold start and come after the sockets serve."""
    code = (
        "import sys\n"
        "import dra_driver.cli.run, dra_driver.node.assembly, dra_driver.node.daemon, dra_driver.node.plugin.driver, dra_driver.node.plugin.prepare\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'prometheus_client', 'urllib3') or m == "
        "'dra_driver.kube.claims')\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_client_is_built_when_no_driver_serves(short_tmp: Path) -> None:
    settings = make_settings(short_tmp)
    paths = PluginPaths(settings.kubelet_dir.absolute(), DRIVER, state_dir=settings.state_dir)
    paths.registry_dir.mkdir(parents=True)
    paths.registration_socket.write_text("not a socket")  # the only driver cannot register

    def connect() -> ApiWiring:
        raise AssertionError("connect called although no driver serves")

    daemon = Daemon([ExampleBackend(BackendSettings(node_name="node-a"))], None, settings, connect=connect)
    try:
        status = daemon.start()
        assert status.running == [] and DRIVER in status.failed
    finally:
        daemon.stop()
