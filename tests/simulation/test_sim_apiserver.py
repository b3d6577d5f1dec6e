"""The simulated API server, driven through the real kubernetes client."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.support import eventually
from dra_driver.kube.client import make_api_client
from dra_driver.simulation.api_server import ServerOptions, SimApiServer

DRIVER = "gpu.example.com"


def slice_body(node: str = "node-a", driver: str = DRIVER, devices: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node}-{driver}-"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
            "devices": devices if devices is not None else [{"name": "gpu-0"}],
            **spec,
        },
    }


@pytest.fixture
def server() -> Iterator[SimApiServer]:
    with SimApiServer() as srv:
        yield srv


@pytest.fixture
def api(server: SimApiServer) -> client.ResourceV1Api:
    # No urllib3 retries: the tests below want to see every injected answer.
    api_client = make_api_client(server.url)
    api_client.configuration.retries = 0
    api_client.rest_client.pool_manager.connection_pool_kw["retries"] = False
    return client.ResourceV1Api(api_client)


def error_of(exc: ApiException) -> dict[str, Any]:
    return json.loads(exc.body)


def test_create_with_generate_name_sets_server_fields(api: client.ResourceV1Api, server: SimApiServer) -> None:
    first = api.create_resource_slice(slice_body())
    second = api.create_resource_slice(slice_body())
    assert first.metadata.name.startswith(f"node-a-{DRIVER}-") and len(first.metadata.name) == len(f"node-a-{DRIVER}-") + 5
    assert first.metadata.name != second.metadata.name
    assert first.metadata.uid and first.metadata.uid != second.metadata.uid
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)
    assert first.metadata.generation == 1
    assert {o["metadata"]["name"] for o in server.objects("ResourceSlice")} == {first.metadata.name, second.metadata.name}
    assert server.writes("create", "resourceslices") == 2


def test_create_existing_name_is_already_exists(api: client.ResourceV1Api) -> None:
    body = slice_body()
    body["metadata"] = {"name": "fixed"}
    api.create_resource_slice(body)
    with pytest.raises(ApiException) as caught:
        api.create_resource_slice(body)
    assert caught.value.status == 409 and error_of(caught.value)["reason"] == "AlreadyExists"


def test_stale_update_conflicts_and_fresh_update_succeeds(api: client.ResourceV1Api) -> None:
    created = api.create_resource_slice(slice_body(), _preload_content=False)
    obj = json.loads(created.data)
    fresh = json.loads(json.dumps(obj))
    fresh["spec"]["devices"].append({"name": "gpu-1"})
    updated = json.loads(api.replace_resource_slice(obj["metadata"]["name"], fresh, _preload_content=False).data)
    assert updated["metadata"]["generation"] == 2
    assert int(updated["metadata"]["resourceVersion"]) > int(obj["metadata"]["resourceVersion"])
    with pytest.raises(ApiException) as caught:
        api.replace_resource_slice(obj["metadata"]["name"], obj)  # still carries the old resourceVersion
    assert caught.value.status == 409 and error_of(caught.value)["reason"] == "Conflict"


def test_immutable_fields_and_invalid_slices_are_422(api: client.ResourceV1Api) -> None:
    obj = json.loads(api.create_resource_slice(slice_body(), _preload_content=False).data)
    obj["spec"]["nodeName"] = "node-b"
    with pytest.raises(ApiException) as caught:
        api.replace_resource_slice(obj["metadata"]["name"], obj)
    status = error_of(caught.value)
    assert caught.value.status == 422 and any(c["field"] == "spec.nodeName" for c in status["details"]["causes"])
    with pytest.raises(ApiException) as caught:
        api.create_resource_slice(slice_body(devices=[{"name": "GPU_0"}]))
    assert caught.value.status == 422
    assert "GPU_0" in error_of(caught.value)["message"]


def test_missing_object_is_a_404_status(api: client.ResourceV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        api.read_resource_slice("absent")
    status = error_of(caught.value)
    assert caught.value.status == 404 and status["kind"] == "Status" and status["reason"] == "NotFound"


def test_delete_preconditions(api: client.ResourceV1Api, server: SimApiServer) -> None:
    obj = json.loads(api.create_resource_slice(slice_body(), _preload_content=False).data)
    name = obj["metadata"]["name"]
    with pytest.raises(ApiException) as caught:
        api.delete_resource_slice(name, body={"preconditions": {"uid": "someone-else"}})
    assert caught.value.status == 409
    server.modify_as_other("ResourceSlice", name, lambda o: o["metadata"].setdefault("labels", {}).update(x="y"))
    with pytest.raises(ApiException) as caught:
        api.delete_resource_slice(
            name, body={"preconditions": {"uid": obj["metadata"]["uid"], "resourceVersion": obj["metadata"]["resourceVersion"]}}
        )
    assert caught.value.status == 409
    current = server.store.get("ResourceSlice", name)
    assert current is not None
    api.delete_resource_slice(
        name, body={"preconditions": {"uid": current["metadata"]["uid"], "resourceVersion": current["metadata"]["resourceVersion"]}}
    )
    assert server.objects("ResourceSlice") == []


def test_field_and_label_selectors(api: client.ResourceV1Api) -> None:
    api.create_resource_slice(slice_body("node-a"))
    api.create_resource_slice(slice_body("node-b"))
    other = slice_body("node-a", driver="nic.example.com")
    other["metadata"]["labels"] = {"tier": "fast"}
    api.create_resource_slice(other)
    names = lambda sel: sorted(i.spec.driver + "@" + i.spec.node_name for i in api.list_resource_slice(field_selector=sel).items)  # noqa: E731
    assert names(f"spec.nodeName=node-a,spec.driver={DRIVER}") == [f"{DRIVER}@node-a"]
    assert names("spec.nodeName=node-a") == [f"{DRIVER}@node-a", "nic.example.com@node-a"]
    assert names(f"spec.driver!={DRIVER}") == ["nic.example.com@node-a"]
    assert [i.spec.driver for i in api.list_resource_slice(label_selector="tier in (fast,slow)").items] == ["nic.example.com"]
    assert len(api.list_resource_slice(label_selector="!tier").items) == 2
    with pytest.raises(ApiException) as caught:
        api.list_resource_slice(field_selector="spec.pool.name=x")
    assert caught.value.status == 400


def test_list_pagination(api: client.ResourceV1Api) -> None:
    for _ in range(5):
        api.create_resource_slice(slice_body())
    page = api.list_resource_slice(limit=2)
    seen = [i.metadata.name for i in page.items]
    while page.metadata._continue:
        page = api.list_resource_slice(limit=2, _continue=page.metadata._continue)
        seen += [i.metadata.name for i in page.items]
    assert len(seen) == 5 == len(set(seen))


def test_list_resource_version_semantics_of_the_watch_cache(api: client.ResourceV1Api, server: SimApiServer) -> None:
    """As a v1.35.6 kube-apiserver answers (measured on the loopback kit): no resourceVersion is a consistent read;
    resourceVersion=0 is the cache, whole (limit ignored); NotOlderThan is the cache, paginated."""
    for _ in range(3):
        api.create_resource_slice(slice_body())
    assert len(api.list_resource_slice(limit=2).items) == 2
    assert server.consistent_lists("ResourceSlice") == 1
    assert len(api.list_resource_slice(limit=2, resource_version="0").items) == 3
    page = api.list_resource_slice(limit=2, resource_version="1", resource_version_match="NotOlderThan")
    assert len(page.items) == 2 and page.metadata._continue
    assert server.consistent_lists("ResourceSlice") == 1 and server.lists[("resourceslices", "cache")] == 2
    with pytest.raises(ApiException) as raised:
        api.list_resource_slice(resource_version_match="NotOlderThan")
    assert raised.value.status == 422


def test_a_held_cache_answers_from_where_it_stopped(api: client.ResourceV1Api, server: SimApiServer) -> None:
    api.create_resource_slice(slice_body())
    held = server.hold_cache(catch_up=False)
    api.create_resource_slice(slice_body())
    cached = api.list_resource_slice(resource_version="0")
    assert len(cached.items) == 1 and cached.metadata.resource_version == str(held)
    assert len(api.list_resource_slice().items) == 2  # a consistent read sees the truth
    with pytest.raises(ApiException) as raised:
        api.list_resource_slice(resource_version=str(held + 1), resource_version_match="NotOlderThan")
    assert raised.value.status == 504 and error_of(raised.value)["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    server.hold_cache()  # one that catches up when asked for more
    api.create_resource_slice(slice_body())
    newer = api.list_resource_slice(resource_version=str(server.store.resource_version), resource_version_match="NotOlderThan")
    assert len(newer.items) == 3 and len(api.list_resource_slice(resource_version="0").items) == 2
    server.release_cache()
    assert len(api.list_resource_slice(resource_version="0").items) == 3


def test_delete_collection_by_field_selector(api: client.ResourceV1Api, server: SimApiServer) -> None:
    api.create_resource_slice(slice_body("node-a"))
    api.create_resource_slice(slice_body("node-a", driver="nic.example.com"))
    api.create_resource_slice(slice_body("node-b"))
    api.delete_collection_resource_slice(field_selector="spec.nodeName=node-a")
    assert [o["spec"]["nodeName"] for o in server.objects("ResourceSlice")] == ["node-b"]


def test_owner_deletion_garbage_collects_dependents(api: client.ResourceV1Api, server: SimApiServer) -> None:
    node = server.add_node("node-a")
    body = slice_body()
    body["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": node["metadata"]["uid"], "controller": True}]
    api.create_resource_slice(body)
    api.create_resource_slice(slice_body("node-b"))
    client.CoreV1Api(api.api_client).delete_node("node-a")
    assert [o["spec"]["nodeName"] for o in server.objects("ResourceSlice")] == ["node-b"]


def collect_events(api: client.ResourceV1Api, out: list[tuple[str, str]], **kwargs: Any) -> threading.Thread:
    def run() -> None:
        for event in watch.Watch().stream(api.list_resource_slice, **kwargs):
            out.append((event["type"], event["raw_object"]["metadata"]["name"]))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_watch_streams_added_modified_deleted_with_selector(api: client.ResourceV1Api, server: SimApiServer) -> None:
    existing = api.create_resource_slice(slice_body("node-a")).metadata.name
    events: list[tuple[str, str]] = []
    thread = collect_events(api, events, field_selector="spec.nodeName=node-a", timeout_seconds=2)
    eventually(lambda: events)  # initial ADDED for what exists
    api.create_resource_slice(slice_body("node-b"))  # not for this watcher
    server.modify_as_other("ResourceSlice", existing, lambda o: o["spec"]["devices"].append({"name": "gpu-9"}))
    server.delete_as_other("ResourceSlice", existing)
    thread.join(timeout=5)
    assert events == [("ADDED", existing), ("MODIFIED", existing), ("DELETED", existing)]


def test_watch_from_resource_version_and_expiry(api: client.ResourceV1Api, server: SimApiServer) -> None:
    api.create_resource_slice(slice_body("node-z"))
    start = api.list_resource_slice().metadata.resource_version
    created = api.create_resource_slice(slice_body()).metadata.name
    events: list[tuple[str, str]] = []
    collect_events(api, events, resource_version=start, timeout_seconds=1).join(timeout=5)
    assert events == [("ADDED", created)]
    server.store.compact()
    with pytest.raises(ApiException) as caught:
        for _ in watch.Watch().stream(api.list_resource_slice, resource_version=start, timeout_seconds=1):
            pass
    assert caught.value.status == 410


def test_dropped_watch_breaks_the_stream(api: client.ResourceV1Api, server: SimApiServer) -> None:
    failures: list[BaseException] = []

    def run() -> None:
        try:
            for _ in watch.Watch().stream(api.list_resource_slice, timeout_seconds=30):
                pass
        except Exception as exc:  # what the client raises on a cut stream is urllib3's business
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    eventually(lambda: server.open_watches == 1)
    assert server.drop_watches() == 1
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert failures and isinstance(failures[0], (urllib3.exceptions.HTTPError, ApiException))


@pytest.mark.parametrize("code", [409, 429, 500, 503])
def test_injected_faults_hit_only_matching_requests(api: client.ResourceV1Api, server: SimApiServer, code: int) -> None:
    server.inject("create", "ResourceSlice", code, count=2, retry_after=3 if code == 429 else None)
    api.list_resource_slice()  # a list is not affected
    for _ in range(2):
        with pytest.raises(ApiException) as caught:
            api.create_resource_slice(slice_body())
        assert caught.value.status == code
    if code == 429:
        assert caught.value.headers["Retry-After"] == "3"
    api.create_resource_slice(slice_body())
    assert server.writes("create") == 1
    assert server.requests[("create", "resourceslices")] == 3


def test_connection_drop_fault_and_restart_keep_the_store(api: client.ResourceV1Api, server: SimApiServer) -> None:
    api.create_resource_slice(slice_body())
    server.inject("list", None, 0)
    with pytest.raises(urllib3.exceptions.HTTPError):
        api.list_resource_slice()
    server.stop()
    with pytest.raises(urllib3.exceptions.HTTPError):
        api.list_resource_slice()
    server.start()
    assert len(api.list_resource_slice().items) == 1


def test_feature_gates_drop_fields_like_the_apiserver() -> None:
    devices = [
        {
            "name": "gpu-0",
            "taints": [{"key": "example.com/unhealthy", "effect": "NoSchedule"}],
            "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "1Gi"}}}],
        }
    ]
    with SimApiServer(ServerOptions(partitionable_devices=False, taints=False)) as server:
        api = client.ResourceV1Api(make_api_client(server.url))
        stored = json.loads(api.create_resource_slice(slice_body(devices=devices), _preload_content=False).data)
        assert stored["spec"]["devices"] == [{"name": "gpu-0"}]
        counters = slice_body(devices=[])
        counters["spec"].pop("devices")
        counters["spec"]["sharedCounters"] = [{"name": "gpu-0", "counters": {"memory": {"value": "1Gi"}}}]
        assert "sharedCounters" not in json.loads(api.create_resource_slice(counters, _preload_content=False).data)["spec"]
    with SimApiServer() as server:
        api = client.ResourceV1Api(make_api_client(server.url))
        stored = json.loads(api.create_resource_slice(slice_body(devices=devices), _preload_content=False).data)
        taint = stored["spec"]["devices"][0]["taints"][0]
        assert taint["timeAdded"].endswith("Z") and stored["spec"]["devices"][0]["consumesCounters"]


def test_resource_claims_are_namespaced_with_a_status_subresource(api: client.ResourceV1Api, server: SimApiServer) -> None:
    claim = {
        "metadata": {"name": "c1"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
        "status": {"allocation": {}},
    }
    created = api.create_namespaced_resource_claim("team-a", claim)
    assert created.status is None  # status is written only through /status
    with pytest.raises(ApiException) as caught:
        api.read_namespaced_resource_claim("c1", "team-b")
    assert caught.value.status == 404
    allocation = {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-0"}]}}
    body = json.loads(api.read_namespaced_resource_claim("c1", "team-a", _preload_content=False).data)
    body["status"] = {"allocation": allocation}
    api.replace_namespaced_resource_claim_status("c1", "team-a", body)
    read = api.read_namespaced_resource_claim("c1", "team-a")
    assert read.status.allocation.devices.results[0].device == "gpu-0"
    # Seeding directly (what the plugin tests do) is served the same way.
    seeded = server.store.put(
        {**claim, "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c2", "namespace": "team-a"}}
    )
    assert api.read_namespaced_resource_claim("c2", "team-a").metadata.uid == seeded["metadata"]["uid"]
    assert [c.metadata.name for c in api.list_resource_claim_for_all_namespaces().items] == ["c1", "c2"]


def test_merge_patch(api: client.ResourceV1Api) -> None:
    name = api.create_resource_slice(slice_body()).metadata.name
    patched = api.patch_resource_slice(name, {"metadata": {"labels": {"a": "b"}}}, _content_type="application/merge-patch+json")
    assert patched.metadata.labels == {"a": "b"} and patched.spec.devices[0].name == "gpu-0"
