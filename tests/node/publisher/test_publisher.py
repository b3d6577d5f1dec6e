"""SlicePublisher against the simulated API server through the real kubernetes client."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from dra_driver.kube.client import make_json_api
from dra_driver.simulation.api_server import ServerOptions, SimApiServer
from dra_driver.model.device import DeviceTaint
from dra_driver.node.publisher import SlicePublisher
from tests.node.publisher.conftest import DRIVER, FAST, NODE, Source, device_names, eventually, pool_consistent, slices

Build = Callable[..., SlicePublisher]


def gpu_names(count: int) -> set[str]:
    return {f"gpu-{i}" for i in range(count)}


def test_first_publish_uses_generate_name_owner_and_consistent_pool(server: SimApiServer, make_publisher: Build) -> None:
    publisher = make_publisher(Source(150))
    plan = publisher.sync_once()
    objs = slices(server)
    node_uid = server.store.get("Node", NODE)["metadata"]["uid"]  # type: ignore[index]
    assert len(objs) == 3 and plan.generation == 0  # 64 + 64 + 22 with room reserved for taints
    assert pool_consistent(objs, gpu_names(150))
    for obj in objs:
        assert obj["metadata"]["generateName"] == f"{NODE}-{DRIVER}-"
        assert obj["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": True}]
    assert server.writes("create", "resourceslices") == 3
    publisher.sync_once()
    assert server.writes() == 3  # nothing changed, nothing written


def test_one_slice_change_is_updated_in_place(server: SimApiServer, make_publisher: Build) -> None:
    source = Source(150)
    publisher = make_publisher(source)
    publisher.sync_once()
    before = {o["metadata"]["name"]: o for o in slices(server)}
    source.count = 149  # gpu-149 leaves the last slice only
    publisher.refresh_inventory()
    publisher.sync_once()
    after = {o["metadata"]["name"]: o for o in slices(server)}
    assert set(after) == set(before) and server.writes("update") == 1
    assert {o["spec"]["pool"]["generation"] for o in after.values()} == {0}
    assert device_names(list(after.values())) == gpu_names(149)


def test_growth_bumps_generation_in_every_slice(server: SimApiServer, make_publisher: Build) -> None:
    source = Source(64)
    publisher = make_publisher(source)
    publisher.sync_once()
    source.count = 100
    publisher.refresh_inventory()
    publisher.sync_once()
    objs = slices(server)
    assert len(objs) == 2 and pool_consistent(objs, gpu_names(100))
    assert {o["spec"]["pool"]["generation"] for o in objs} == {1}


def test_shrink_deletes_obsolete_slices_and_bumps(server: SimApiServer, make_publisher: Build) -> None:
    source = Source(200)
    publisher = make_publisher(source)
    publisher.sync_once()
    source.count = 10
    publisher.refresh_inventory()
    plan = publisher.sync_once()
    objs = slices(server)
    assert len(objs) == 1 and pool_consistent(objs, gpu_names(10)) and plan.generation == 1
    assert server.writes("delete") == 3
    deletes = [r.body for r in server.request_log if r.verb == "delete"]
    assert len(deletes) == 3 and all(set(b["preconditions"]) == {"uid", "resourceVersion"} for b in deletes)


def test_delete_sends_uid_and_resource_version_preconditions(server: SimApiServer, make_publisher: Build, monkeypatch: pytest.MonkeyPatch) -> None:
    source = Source(100)
    publisher = make_publisher(source)
    publisher.sync_once()
    source.count = 10
    publisher.refresh_inventory()
    # Someone changes the obsolete slice between our list and our delete: the delete must fail.
    listed = publisher._list()
    victim = next(o for o in listed if "gpu-99" in device_names([o]))
    server.modify_as_other("ResourceSlice", victim["metadata"]["name"], lambda o: o["metadata"].setdefault("labels", {}).update(touched="yes"))
    monkeypatch.setattr(publisher, "_list", lambda: listed)
    with pytest.raises(ApiException) as caught:
        publisher.sync_once()
    assert caught.value.status == 409
    assert server.store.get("ResourceSlice", victim["metadata"]["name"]) is not None
    monkeypatch.undo()
    publisher.sync_once()  # with a fresh list it converges
    assert pool_consistent(slices(server), gpu_names(10))


def test_other_nodes_and_drivers_are_never_touched(server: SimApiServer, make_publisher: Build) -> None:
    server.add_node("node-b")
    make_publisher(Source(70), node="node-b").sync_once()
    make_publisher(Source(70, driver="nic.example.com"), driver="nic.example.com").sync_once()
    foreign = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in server.objects("ResourceSlice")}
    source = Source(70)
    publisher = make_publisher(source)
    publisher.sync_once()
    source.count = 1
    publisher.refresh_inventory()
    publisher.sync_once()
    publisher.withdraw()
    remaining = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in server.objects("ResourceSlice")}
    assert remaining == foreign


def test_repairs_deletion_and_modification_by_others(server: SimApiServer, make_publisher: Build) -> None:
    publisher = make_publisher(Source(100)).start()
    eventually(lambda: pool_consistent(slices(server), gpu_names(100)), what="first publish")
    victim = slices(server)[0]
    server.delete_as_other("ResourceSlice", victim["metadata"]["name"])
    eventually(lambda: pool_consistent(slices(server), gpu_names(100)) and len(slices(server)) == 2, what="repair after delete")
    target = slices(server)[0]["metadata"]["name"]
    server.modify_as_other("ResourceSlice", target, lambda o: o["spec"]["devices"].pop())
    eventually(lambda: pool_consistent(slices(server), gpu_names(100)), what="repair after modification")
    eventually(lambda: publisher.generation == slices(server)[0]["spec"]["pool"]["generation"], what="generation remembered")


def test_republishes_after_kubelet_delete_collection(server: SimApiServer, make_publisher: Build) -> None:
    publisher = make_publisher(Source(100)).start()
    eventually(lambda: pool_consistent(slices(server), gpu_names(100)), what="first publish")
    generation = slices(server)[0]["spec"]["pool"]["generation"]
    server.delete_collection_as_other("ResourceSlice", spec__nodeName=NODE)  # what a starting kubelet does
    eventually(lambda: pool_consistent(slices(server), gpu_names(100)), what="republish after wipe")
    assert slices(server)[0]["spec"]["pool"]["generation"] > generation
    eventually(lambda: publisher.generation == slices(server)[0]["spec"]["pool"]["generation"], what="generation remembered")


@pytest.mark.parametrize(
    ("verb", "code", "retry_after"),
    [("create", 409, None), ("create", 429, 1), ("create", 500, None), ("list", 503, None), ("list", 0, None), ("update", 409, None)],
)
def test_backoff_and_convergence_under_faults(server: SimApiServer, make_publisher: Build, verb: str, code: int, retry_after: int | None) -> None:
    source = Source(100)
    if verb == "update":
        make_publisher(Source(99)).sync_once()  # so that the publisher below has one slice to update
    server.inject(verb, "resourceslices", code, count=4, retry_after=retry_after)
    make_publisher(source).start()
    eventually(lambda: pool_consistent(slices(server), gpu_names(100)), what=f"convergence after {code} on {verb}")
    assert server.requests[(verb, "resourceslices")] >= 4


def test_converges_when_the_server_comes_back(server: SimApiServer, make_publisher: Build) -> None:
    server.stop()
    publisher = make_publisher(Source(70)).start()
    eventually(lambda: publisher._backoff.failures >= 2, what="failed attempts while the server is down")
    server.start()
    eventually(lambda: pool_consistent(slices(server), gpu_names(70)), what="convergence after outage")


def test_dropped_watch_is_reestablished(server: SimApiServer, make_publisher: Build) -> None:
    make_publisher(Source(70)).start()
    eventually(lambda: pool_consistent(slices(server), gpu_names(70)) and server.open_watches == 1, what="publish and watch")
    server.drop_watches()
    eventually(lambda: server.open_watches == 1 and server.requests[("watch", "resourceslices")] >= 2, what="watch re-opened")
    server.delete_as_other("ResourceSlice", slices(server)[0]["metadata"]["name"])
    eventually(lambda: pool_consistent(slices(server), gpu_names(70)), what="repair through the new watch")


def test_expired_watch_resyncs(server: SimApiServer, make_publisher: Build) -> None:
    make_publisher(Source(70)).start()
    eventually(lambda: pool_consistent(slices(server), gpu_names(70)) and server.open_watches == 1, what="publish and watch")
    server.store.compact()
    server.drop_watches()  # the re-opened watch starts from a compacted version only if it does not re-list
    server.delete_as_other("ResourceSlice", slices(server)[0]["metadata"]["name"])
    eventually(lambda: pool_consistent(slices(server), gpu_names(70)), what="repair after expiry")


def test_partitionable_fields_dropped_fall_back_to_static(make_publisher: Build, caplog: pytest.LogCaptureFixture) -> None:
    with SimApiServer(ServerOptions(partitionable_devices=False)) as server:
        server.add_node(NODE)
        source = Source(4)
        publisher = make_publisher(source, api=make_json_api(server.url), options=FAST.__class__(**{**FAST.__dict__, "partitioning": "dynamic"}))
        with caplog.at_level(logging.WARNING, logger="dra_driver.node.publisher"):
            publisher.sync_once()
            publisher.sync_once()
        objs = slices(server)
        assert source.asked == ["dynamic", "static"] and publisher.partitioning == "static"
        assert pool_consistent(objs, gpu_names(4)) and not any(o["spec"].get("sharedCounters") for o in objs)
        warnings = [r for r in caplog.records if "DRAPartitionableDevices" in r.getMessage()]
        assert len(warnings) == 1


def test_dynamic_publishing_keeps_counters_when_the_gate_is_on(server: SimApiServer, make_publisher: Build) -> None:
    publisher = make_publisher(Source(4), options=FAST.__class__(**{**FAST.__dict__, "partitioning": "dynamic"}))
    publisher.sync_once()
    objs = slices(server)
    assert publisher.partitioning == "dynamic"
    assert sum(len(o["spec"].get("sharedCounters") or []) for o in objs) == 4
    assert device_names(objs) == gpu_names(4) | {f"gpu-{i}-mig-1g" for i in range(4)}


def test_health_change_is_exactly_one_slice_write(server: SimApiServer, make_publisher: Build) -> None:
    publisher = make_publisher(Source(200))
    publisher.sync_once()
    before = server.writes()
    assert publisher.set_device_health("gpu-130", healthy=False, taint=DeviceTaint("gpu.example.com/xid", "NoExecute", "79"))
    publisher.sync_once()
    assert server.writes() - before == 1
    tainted = [d for o in slices(server) for d in o["spec"]["devices"] if d.get("taints")]
    assert [(d["name"], d["taints"][0]["key"], d["taints"][0]["effect"]) for d in tainted] == [("gpu-130", "gpu.example.com/xid", "NoExecute")]
    time_added = tainted[0]["taints"][0]["timeAdded"]
    publisher.sync_once()  # the server-filled timeAdded is not a change
    assert server.writes() - before == 1
    assert not publisher.set_device_health("gpu-130", healthy=False, taint=DeviceTaint("gpu.example.com/xid", "NoExecute", "79"))
    publisher.set_device_health("gpu-130", healthy=True)
    publisher.sync_once()
    assert server.writes() - before == 2 and not any(d.get("taints") for o in slices(server) for d in o["spec"]["devices"])
    assert time_added


def test_taints_dropped_withdraw_unhealthy_devices(make_publisher: Build, caplog: pytest.LogCaptureFixture) -> None:
    with SimApiServer(ServerOptions(taints=False)) as server:
        server.add_node(NODE)
        publisher = make_publisher(Source(100), api=make_json_api(server.url))
        publisher.sync_once()
        with caplog.at_level(logging.WARNING, logger="dra_driver.node.publisher"):
            publisher.set_device_health("gpu-3", healthy=False)
            publisher.sync_once()
            publisher.set_device_health("gpu-4", healthy=False)
            publisher.sync_once()
        assert not publisher.taints_supported
        assert pool_consistent(slices(server), gpu_names(100) - {"gpu-3", "gpu-4"})
        assert len([r for r in caplog.records if "DRADeviceTaints" in r.getMessage()]) == 1
        publisher.set_device_health("gpu-3", healthy=True)
        publisher.sync_once()
        assert device_names(slices(server)) == gpu_names(100) - {"gpu-4"}


def test_health_events_through_the_running_publisher(server: SimApiServer, make_publisher: Build) -> None:
    from dra_driver.backend.interface import HealthEvent

    publisher = make_publisher(Source(10)).start()
    eventually(lambda: pool_consistent(slices(server), gpu_names(10)), what="first publish")
    publisher.apply_health_event(HealthEvent(device="gpu-2", healthy=False, reason="XID 79"))
    eventually(lambda: any(d.get("taints") for o in slices(server) for d in o["spec"]["devices"]), what="taint published")
    taint: dict[str, Any] = next(d for o in slices(server) for d in o["spec"]["devices"] if d.get("taints"))["taints"][0]
    assert taint["key"] == f"{DRIVER}/unhealthy" and taint["effect"] == "NoSchedule"


def test_invalid_inventory_is_refused_before_any_write(server: SimApiServer, make_publisher: Build) -> None:
    from dra_driver.common.errors import ValidationError
    from dra_driver.model.device import Device, Inventory

    publisher = make_publisher(lambda _p: Inventory(driver=DRIVER, devices=[Device(name="GPU_0")]))
    with pytest.raises(ValidationError, match="GPU_0"):
        publisher.sync_once()
    assert server.writes() == 0


def test_an_outage_is_one_warning_and_its_end_another(server: SimApiServer, make_publisher: Build, caplog: pytest.LogCaptureFixture) -> None:
    """An unreachable server printed a warning per retry (with urllib3's own retry lines, 35 in 120 s): one line per
    problem instead, and one when publishing works again."""
    server.stop()
    with caplog.at_level(logging.DEBUG, logger="dra_driver.node.publisher"):
        publisher = make_publisher(Source(70)).start()
        eventually(lambda: publisher._backoff.failures >= 3, what="failed attempts while the server is down")
        server.start()
        eventually(lambda: pool_consistent(slices(server), gpu_names(70)), what="convergence after outage")
        eventually(lambda: any("works again" in r.getMessage() for r in caplog.records), what="the outage's end said")
    failed = [r for r in caplog.records if r.getMessage().startswith("publishing slices failed")]
    assert len(failed) >= 3 and [r.levelno for r in failed].count(logging.WARNING) == 1
    assert [r.levelno for r in caplog.records if "works again" in r.getMessage()] == [logging.WARNING]


def test_urllib3_retry_lines_only_with_debug_verbosity() -> None:
    from dra_driver.common.logs import configure_logging

    root, urllib3_logger = logging.getLogger(), logging.getLogger("urllib3")
    saved = (root.handlers[:], root.level, urllib3_logger.level)  # its handler would write to this test's captured stderr
    try:
        configure_logging(0)
        assert urllib3_logger.getEffectiveLevel() == logging.ERROR
        configure_logging(2)
        assert urllib3_logger.getEffectiveLevel() == logging.WARNING
    finally:
        root.handlers[:], _, _ = saved
        root.setLevel(saved[1])
        urllib3_logger.setLevel(saved[2])


def test_an_unverified_tls_server_is_said_once_without_urllib3s_warning(caplog: pytest.LogCaptureFixture) -> None:
    import warnings

    import urllib3
    from kubernetes import client

    from dra_driver.kube.client import JsonApi, api_client_for

    configuration = client.Configuration(host="https://192.0.2.7:6443")
    configuration.verify_ssl = False
    with caplog.at_level(logging.WARNING, logger="dra_driver.kube.client"), warnings.catch_warnings(record=True) as shown:
        JsonApi(configuration)  # the daemon's transport
        JsonApi(configuration)
        api_client_for(configuration)  # a tool's typed client
        warnings.warn("insecure", urllib3.exceptions.InsecureRequestWarning)  # what urllib3 does on each request
    assert [r.getMessage() for r in caplog.records].count(
        "the API server's TLS certificate is not verified (insecure-skip-tls-verify in the kubeconfig)"
    ) == 1
    assert not [w for w in shown if issubclass(w.category, urllib3.exceptions.InsecureRequestWarning)]
