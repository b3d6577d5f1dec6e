"""The metrics endpoint's bounds (dra_driver/node/metrics_http.py): idle connections cost no thread, are capped and
closed, and neither they nor the endpoint's failures reach prepare."""

from __future__ import annotations

import resource
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from conftest import make_settings
from example_backend import DRIVER, ExampleBackend

from dra_driver.node.daemon import Daemon
from dra_driver.kube.claims import ClaimReader
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.metrics_http import DEFAULT_MAX_CONNECTIONS, BindAddress, HttpEndpoint, Response
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.backend.interface import BackendSettings, ClaimRef

IDLE = 1000


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture
def idle_sockets() -> Iterator[list[socket.socket]]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < IDLE + 500:
        pytest.skip(f"needs {IDLE + 500} open files, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, IDLE + 500), hard))
    held: list[socket.socket] = []
    try:
        yield held
    finally:
        for sock in held:
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def open_idle(port: int, count: int, into: list[socket.socket]) -> None:
    """Connect and send nothing, as a slowloris client or a scraper that hangs would."""
    for _ in range(count):
        sock = socket.socket()
        sock.settimeout(5)
        sock.connect(("127.0.0.1", port))
        into.append(sock)


def scrape(port: int, path: str = "/metrics") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_thousand_idle_connections_cost_no_thread_are_capped_and_prepare_is_unaffected(short_tmp: Path, apiserver, idle_sockets) -> None:
    port = free_port()
    settings = make_settings(short_tmp, pod_uid="pod-a")
    daemon = Daemon([ExampleBackend(BackendSettings(node_name="node-a"))], ClaimReader(apiserver.json_api()), settings,
                    metrics_address=BindAddress("127.0.0.1", port))  # fmt: skip
    daemon.start()
    try:
        conn = register(daemon.plugins[DRIVER].paths.registration_socket)
        assert scrape(port)[0] == 200
        endpoint = daemon.metrics_endpoint
        assert endpoint is not None
        threads, rss = threading.active_count(), rss_kib()
        open_idle(port, IDLE, idle_sockets)
        time.sleep(0.5)  # let the endpoint accept what the backlog holds
        assert threading.active_count() <= threads, "idle connections took threads"
        assert endpoint.open_connections <= DEFAULT_MAX_CONNECTIONS
        grown_kib = rss_kib() - rss
        assert grown_kib < 8 * 1024, f"{IDLE} idle connections grew the process by {grown_kib} KiB"

        # While they are held: prepare and unprepare over the kubelet socket, and a scrape, still answer.
        stored = apiserver.store.put(allocated_claim_object("job", "default", DRIVER, "node-a", {"gpu": ["gpu-0"]}))
        ref = ClaimRef("default", "job", stored["metadata"]["uid"])
        assert conn.prepare([ref], timeout=10).claims[ref.uid].error == ""
        status, text = scrape(port)
        assert status == 200 and 'dra_driver_prepared_devices{driver="gpu.example.com"} 1.0' in text
        assert endpoint.refused_room > 0, "the cap never closed a connection"
        assert conn.unprepare([ref], timeout=10).claims[ref.uid].error == ""
        conn.close()
    finally:
        daemon.stop()


def test_idle_connections_are_closed_after_the_timeout(idle_sockets) -> None:
    endpoint = HttpEndpoint(BindAddress("127.0.0.1", free_port()), {"/x": lambda: Response(200, b"x\n")}, idle_timeout=0.3).start()
    try:
        assert endpoint.wait_bound(5)
        assert endpoint.port is not None
        open_idle(endpoint.port, 20, idle_sockets)
        half = socket.create_connection(("127.0.0.1", endpoint.port), timeout=5)
        idle_sockets.append(half)
        half.sendall(b"GET /x HTTP/1.1\r\nHost: a\r\n")  # a head that never ends
        for sock in idle_sockets:
            assert sock.recv(1) == b"", "an idle connection was kept open"
        assert endpoint.open_connections == 0 and endpoint.closed_idle == 21
    finally:
        endpoint.stop()


def test_answers_paths_methods_and_oversized_heads(idle_sockets) -> None:
    def broken() -> Response:
        raise RuntimeError("boom")

    endpoint = HttpEndpoint(BindAddress("127.0.0.1", free_port()), {"/x": lambda: Response(200, b"x\n"), "/broken": broken}).start()
    try:
        assert endpoint.wait_bound(5) and endpoint.port is not None
        assert scrape(endpoint.port, "/x") == (200, "x\n")
        assert scrape(endpoint.port, "/x?debug=1") == (200, "x\n")
        assert scrape(endpoint.port, "/nope")[0] == 404
        assert scrape(endpoint.port, "/broken")[0] == 500  # a handler's bug fails that request, not the endpoint
        assert scrape(endpoint.port, "/x") == (200, "x\n")
        with ExitStack() as stack:
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", endpoint.port), timeout=5))
            sock.sendall(b"POST /x HTTP/1.1\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.1 405 ")
            big = stack.enter_context(socket.create_connection(("127.0.0.1", endpoint.port), timeout=5))
            big.sendall(b"GET /x HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 9000)
            assert big.recv(100).startswith(b"HTTP/1.1 431 ")
    finally:
        endpoint.stop()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:8080", BindAddress("127.0.0.1", 8080)), (":8080", BindAddress("", 8080)), ("[::1]:9090", BindAddress("::1", 9090)),
     ("0", BindAddress("", 0)), ("node-1.example:80", BindAddress("node-1.example", 80))],
)  # fmt: skip
def test_bind_address_forms(text: str, expected: BindAddress) -> None:
    assert BindAddress.parse(text) == expected


@pytest.mark.parametrize("text", ["8080", "host:", "host:99999", "a b:80", "[::1]]:80", "host:-1"])
def test_bind_address_mistakes_name_the_form(text: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT|not an IP"):
        BindAddress.parse(text)
