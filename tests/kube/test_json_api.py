"""JsonApi: plain-JSON requests and raw watches through the real kubernetes client's REST layer, with its auth."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client.configuration import Configuration
from kubernetes.client.rest import ApiException

from dra_driver.kube.client import USER_AGENT, JsonApi, KubeConfigError, api_client_for, load_configuration, make_json_api
from dra_driver.simulation.api_server import SimApiServer

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def body(node: str = "node-a") -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node}-"},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}],
        },
    }


@pytest.fixture
def server() -> Iterator[SimApiServer]:
    with SimApiServer() as srv:
        yield srv


def test_request_round_trip_sends_the_bearer_token(server: SimApiServer) -> None:
    api = make_json_api(server.url)
    api.configuration.api_key = {"authorization": "secret-token"}
    api.configuration.api_key_prefix = {"authorization": "Bearer"}
    created = api.request("POST", SLICES, body=body())
    assert created["metadata"]["name"].startswith("node-a-")
    listed = api.request("GET", SLICES, {"fieldSelector": "spec.nodeName=node-a"})
    assert [i["metadata"]["name"] for i in listed["items"]] == [created["metadata"]["name"]]
    headers = {k.lower(): v for k, v in server.request_log[-1].headers.items()}
    assert headers.get("authorization") == "Bearer secret-token" and headers.get("user-agent") == USER_AGENT


def test_errors_raise_api_exception_with_the_status_body(server: SimApiServer) -> None:
    api = make_json_api(server.url)
    with pytest.raises(ApiException) as caught:
        api.request("GET", f"{SLICES}/absent")
    assert caught.value.status == 404 and '"NotFound"' in caught.value.body
    created = api.request("POST", SLICES, body=body())
    with pytest.raises(ApiException) as caught:
        api.request("DELETE", f"{SLICES}/{created['metadata']['name']}", body={"preconditions": {"uid": "other"}})
    assert caught.value.status == 409
    assert server.request_log[-1].body == {"preconditions": {"uid": "other"}}


def test_watch_stream_yields_raw_events_and_raises_on_expiry(server: SimApiServer) -> None:
    api = make_json_api(server.url)
    api.request("POST", SLICES, body=body("node-z"))
    start = api.request("GET", SLICES)["metadata"]["resourceVersion"]
    created = api.request("POST", SLICES, body=body())
    events = [(e["type"], e["object"]["metadata"]["name"]) for e in api.watch(SLICES, {"resourceVersion": start, "timeoutSeconds": "1"})]
    assert events == [("ADDED", created["metadata"]["name"])]
    server.store.compact()
    with pytest.raises(ApiException) as caught:
        list(api.watch(SLICES, {"resourceVersion": start, "timeoutSeconds": "1"}))
    assert caught.value.status == 410


def test_watch_stop_unblocks_a_reader(server: SimApiServer) -> None:
    stream = make_json_api(server.url).watch(SLICES, {"timeoutSeconds": "60"})
    done = threading.Event()

    def read() -> None:
        try:
            for _ in stream:
                pass
        except Exception:  # a shut-down socket surfaces as a urllib3 error; that is the point
            pass
        done.set()

    threading.Thread(target=read, daemon=True).start()
    stream.stop()
    assert done.wait(5)


def test_configuration_sources(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_configuration(base_url="http://127.0.0.1:1/").host == "http://127.0.0.1:1"
    with pytest.raises(KubeConfigError, match="http"):
        load_configuration(base_url="127.0.0.1:1")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    with pytest.raises(KubeConfigError, match="kubeconfig"):
        load_configuration()


def test_query_values_are_quoted(server: SimApiServer) -> None:
    api = make_json_api(server.url)
    for node in ("node-a", "node-b"):
        api.request("POST", SLICES, body=body(node))
    listed = api.request("GET", SLICES, {"fieldSelector": "spec.nodeName=node-b,spec.driver=gpu.example.com", "limit": "10"})
    assert [i["spec"]["nodeName"] for i in listed["items"]] == ["node-b"]
    assert server.request_log[-1].path.endswith("?fieldSelector=spec.nodeName%3Dnode-b%2Cspec.driver%3Dgpu.example.com&limit=10")


def test_a_rotated_in_cluster_token_is_sent_from_the_next_request(tmp_path: Path, server: SimApiServer) -> None:
    """The in-cluster loader's refresh hook re-reads the service-account token (kubelet rotates it): every request asks."""
    from kubernetes.config.incluster_config import InClusterConfigLoader

    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("first")
    ca.write_text("not checked here")
    configuration = Configuration()
    loader = InClusterConfigLoader(str(token), str(ca), environ={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1"})
    loader.load_and_set(configuration)
    api = JsonApi(configuration)
    assert api.headers()["authorization"] == "bearer first"
    token.write_text("rotated")
    loader.token_expires_at = datetime.datetime.now()  # its minute has passed
    assert api.headers()["authorization"] == "bearer rotated"


def test_a_tools_client_and_the_transport_share_one_pool(server: SimApiServer) -> None:
    api_client = api_client_for(server.client_configuration())
    api = JsonApi.of(api_client)
    assert api.rest is api_client.rest_client and api.configuration is api_client.configuration
    assert api.request("GET", SLICES)["items"] == []

