"""ClaimReader's transport: one kept-alive connection, the host's path prefix kept, proxies honoured,
a dropped connection retried, and the auth headers of the client on every request."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from dra_driver.simulation import api_server as sim_apiserver
from dra_driver.kube.claims import ClaimReader
from dra_driver.kube.client import JsonApi
from dra_driver.simulation.claims import allocated_claim_object

CLAIM = allocated_claim_object("c1", "default", "gpu.nvidia.com", "node-a", {"gpu": ["gpu-0"]})


class _Recorder(ThreadingHTTPServer):
    """Answers every GET with the claim and records the request target (path, or absolute URL via a proxy)."""

    daemon_threads = True

    def __init__(self) -> None:
        self.targets: list[str] = []
        self.headers: list[dict[str, str]] = []
        super().__init__(("127.0.0.1", 0), _RecordingHandler)


class _RecordingHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Recorder

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self.server.targets.append(self.path)
        self.server.headers.append({k.lower(): v for k, v in self.headers.items()})
        body = json.dumps({**CLAIM, "metadata": {**CLAIM["metadata"], "uid": "u-1"}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    server = _Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_gets_share_one_kept_alive_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    with sim_apiserver.SimApiServer() as server:
        server.store.put(CLAIM)
        connections = []
        real_track = server._track
        monkeypatch.setattr(server, "_track", lambda sock: (connections.append(sock), real_track(sock)))
        reader = ClaimReader(server.json_api())
        for _ in range(20):
            assert reader.get("default", "c1").metadata.name == "c1"
        assert len(connections) == 1


def test_a_host_with_a_path_prefix_keeps_it(recorder: _Recorder) -> None:
    host = f"http://127.0.0.1:{recorder.server_address[1]}/k8s/clusters/c-1"
    reader = ClaimReader(JsonApi(client.Configuration(host=host)))
    assert reader.get("default", "c1").metadata.uid == "u-1"
    assert recorder.targets == ["/k8s/clusters/c-1/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c1"]


def test_a_proxy_gets_the_absolute_url(recorder: _Recorder) -> None:
    configuration = client.Configuration(host="http://apiserver.invalid:6443")
    configuration.proxy = f"http://127.0.0.1:{recorder.server_address[1]}"
    reader = ClaimReader(JsonApi(configuration))
    assert reader.get("default", "c1").metadata.uid == "u-1"
    assert recorder.targets == ["http://apiserver.invalid:6443/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c1"]


def test_every_request_carries_the_clients_current_token(recorder: _Recorder) -> None:
    configuration = client.Configuration(host=f"http://127.0.0.1:{recorder.server_address[1]}")
    configuration.api_key = {"authorization": "Bearer first"}
    reader = ClaimReader(JsonApi(configuration))
    reader.get("default", "c1")
    configuration.api_key = {"authorization": "Bearer rotated"}  # a refreshed service-account token
    reader.get("default", "c1")
    assert [h.get("authorization") for h in recorder.headers] == ["Bearer first", "Bearer rotated"]


def test_a_restarted_server_is_reached_again_on_a_fresh_connection() -> None:
    with sim_apiserver.SimApiServer() as server:
        server.store.put(CLAIM)
        reader = ClaimReader(server.json_api())
        reader.get("default", "c1")
        server.stop()  # cuts the kept-alive connection
        server.start()
        assert reader.get("default", "c1").metadata.name == "c1"
