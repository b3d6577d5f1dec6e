"""`dra-driver fleet-exporter`'s library against the in-process API server: the numbers follow watch events, a 410
Gone re-lists, pending claims get explain's reason, and nodes whose slices are stale or gone are named."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import eventually
from dra_driver.sources.classes import shipped_class_documents
from dra_driver.common.prometheus_text import generate_text
from dra_driver.fleet.exporter import FleetExporter
from dra_driver.kube import reflector as reflectors
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.simulation.api_server import SimApiServer
from dra_driver.sources.fleet import simulated

DRIVER = "gpu.nvidia.com"
GPU = "gpu.nvidia.com"  # the shipped class of whole NVIDIA GPUs
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def claim(name: str, requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": "ml"}, "spec": {"devices": devices}}


def exactly(device_class: str, count: int = 1, selector: str | None = None, name: str = "gpu") -> dict[str, Any]:
    request: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    if selector:
        request["selectors"] = [{"cel": {"expression": selector}}]
    return {"name": name, "exactly": request}


@pytest.fixture
def server() -> Iterator[SimApiServer]:
    """Two DGX H100 nodes (8 GPUs each) with their Node objects and the shipped DeviceClasses."""
    with SimApiServer() as sim:
        for obj in simulated("dgx-h100", 2).slices + shipped_class_documents():
            sim.store.put(obj)
        sim.add_node("node-0")
        sim.add_node("node-1")
        yield sim


@pytest.fixture
def exporter(server: SimApiServer) -> Iterator[FleetExporter]:
    started = FleetExporter(server.json_api(), min_interval=0.05, watch_timeout_s=1, backoff_initial_s=5.0).start()
    try:
        assert started.wait_refreshed(0, 30), "no first picture"
        yield started
    finally:
        started.stop()


class _Collected:
    """A collector answering the families collected once."""

    def __init__(self, families: list[Any]) -> None:
        self._families = families

    def collect(self) -> Iterator[Any]:
        return iter(self._families)


def scrape(exporter: FleetExporter) -> Samples:
    registry = CollectorRegistry()
    registry.register(_Collected(list(exporter.collect())))  # one collection for both writers: ages move on between two
    out: Samples = {}
    text = generate_text(registry)
    assert text == generate_latest(registry)  # the exporter's one writer, byte for byte what prometheus_client writes
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(exporter: FleetExporter, name: str, **labels: str) -> float | None:
    return scrape(exporter).get((name, tuple(sorted(labels.items()))))


def devices(exporter: FleetExporter, node: str, state: str, device_class: str = GPU) -> float | None:
    return value(exporter, "dra_fleet_devices", node=node, pool=node, driver=DRIVER, device_class=device_class, state=state)


def pending_reasons(exporter: FleetExporter) -> dict[str, float]:
    return {dict(labels)["reason"]: v for (name, labels), v in scrape(exporter).items() if name == "dra_fleet_claims_pending"}


def test_devices_per_class_and_state_follow_watch_events(server: SimApiServer, exporter: FleetExporter) -> None:
    assert devices(exporter, "node-0", "total") == 8
    assert devices(exporter, "node-0", "free") == 8
    assert devices(exporter, "node-0", "allocated") is None
    # A MIG class selects none of these whole GPUs: no series for it.
    assert not [k for k in scrape(exporter) if ("device_class", "mig.nvidia.com") in k[1]]
    server.store.put(allocated_claim_object("held", "ml", DRIVER, "node-0", {"gpu": ["gpu-0", "gpu-1"]}, device_class=GPU))
    eventually(lambda: devices(exporter, "node-0", "allocated") == 2, what="allocated devices after the claim's ADDED event")
    assert devices(exporter, "node-0", "free") == 6
    assert devices(exporter, "node-1", "free") == 8
    server.delete_as_other("ResourceClaim", "held", "ml")
    eventually(lambda: devices(exporter, "node-0", "free") == 8, what="devices free again after DELETED")
    assert exporter.reflectors["resourceclaims"].events >= 2
    assert value(exporter, "dra_fleet_watch_events_total", resource="resourceclaims") == exporter.reflectors["resourceclaims"].events


def test_tainted_devices_are_counted_apart(server: SimApiServer, exporter: FleetExporter) -> None:
    def taint(obj: dict[str, Any]) -> None:
        obj["spec"]["devices"][3]["taints"] = [{"key": "dra-driver.io/unhealthy", "effect": "NoSchedule"}]

    name = next(s["metadata"]["name"] for s in server.objects("ResourceSlice") if s["spec"]["pool"]["name"] == "node-1")
    server.modify_as_other("ResourceSlice", name, taint)
    eventually(lambda: devices(exporter, "node-1", "tainted") == 1, what="a tainted device after MODIFIED")
    assert devices(exporter, "node-1", "free") == 7


def test_pending_claims_carry_explains_reason(server: SimApiServer, exporter: FleetExporter) -> None:
    server.store.put(claim("fits", [exactly(GPU)]))
    server.store.put(claim("too-many", [exactly(GPU, count=9)]))
    server.store.put(claim("no-such-gpu", [exactly(GPU, selector='device.attributes["gpu.nvidia.com"].productName == "B200"')]))
    server.store.put(claim("no-class", [exactly("gpu.example.com")]))
    server.store.put(claim("apart", [exactly(GPU, count=2)], [{"requests": ["gpu"], "matchAttribute": "gpu.nvidia.com/uuid"}]))
    expected = {"allocatable": 1, "insufficient-devices": 1, "no-matching-device": 1, "class-missing": 1, "constraint": 1}
    eventually(lambda: pending_reasons(exporter) == expected, what=f"reasons {expected}")
    oldest = value(exporter, "dra_fleet_claims_pending_oldest_seconds", namespace="ml", reason="allocatable")
    assert oldest is not None and oldest >= 0
    # Once allocated, a claim is no longer pending.
    fits = server.store.get("ResourceClaim", "fits", "ml")
    assert fits is not None
    fits["status"] = allocated_claim_object("fits", "ml", DRIVER, "node-1", {"gpu": ["gpu-7"]}, device_class=GPU)["status"]
    server.store.put(fits)
    eventually(lambda: "allocatable" not in pending_reasons(exporter), what="the allocated claim leaves the pending count")


def test_a_broken_device_class_costs_only_itself(server: SimApiServer, exporter: FleetExporter) -> None:
    broken = copy.deepcopy(next(c for c in shipped_class_documents() if c["metadata"]["name"] == GPU))
    broken["metadata"]["name"] = "broken.example.com"
    broken["spec"]["selectors"] = [{"cel": {"expression": "device.attributes["}}]
    server.store.put(broken)
    before = exporter.refreshes
    eventually(lambda: exporter.wait_refreshed(before, 0.1), what="a refresh after the class arrived")
    assert devices(exporter, "node-0", "total") == 8
    assert not [k for k in scrape(exporter) if ("device_class", "broken.example.com") in k[1]]


def test_node_slices_published_stale_and_missing(server: SimApiServer, exporter: FleetExporter) -> None:
    def states() -> dict[tuple[str, str], str]:
        return {
            (dict(labels)["node"], dict(labels)["state"]): dict(labels)["driver"]
            for (name, labels), v in scrape(exporter).items()
            if name == "dra_fleet_node_slices" and v == 1
        }

    assert states() == {("node-0", "published"): DRIVER, ("node-1", "published"): DRIVER}
    slice_of = {s["spec"]["pool"]["name"]: s["metadata"]["name"] for s in server.objects("ResourceSlice")}

    def half_published(obj: dict[str, Any]) -> None:
        obj["spec"]["pool"]["resourceSliceCount"] = 2  # the second slice of this generation never came

    server.modify_as_other("ResourceSlice", slice_of["node-0"], half_published)
    eventually(lambda: ("node-0", "stale") in states(), what="node-0 stale")
    server.delete_as_other("ResourceSlice", slice_of["node-1"])
    eventually(lambda: ("node-1", "missing") in states(), what="node-1 missing once its slice is deleted")
    server.delete_as_other("Node", "node-1")
    eventually(lambda: not any(node == "node-1" for node, _ in states()), what="a deleted Node forgotten")


def test_410_gone_relists_at_once_and_keeps_counting(server: SimApiServer, exporter: FleetExporter) -> None:
    slices = exporter.reflectors["resourceslices"]
    lists = slices.lists
    server.inject("watch", "resourceslices", 410, count=1)  # the watch resumed after its 1 s timeout is expired
    # Re-listed at once (the backoff for other failures is 5 s here), and the LIST is counted.
    eventually(lambda: slices.lists > lists, timeout=4.0, what="a re-list on 410")
    assert value(exporter, "dra_fleet_list_requests_total", resource="resourceslices") == slices.list_requests
    server.store.put(allocated_claim_object("after", "ml", DRIVER, "node-1", {"gpu": ["gpu-0"]}, device_class=GPU))
    eventually(lambda: devices(exporter, "node-1", "allocated") == 1, what="numbers still follow events after the re-list")
    assert devices(exporter, "node-0", "total") == 8


def test_a_list_is_read_in_pages(server: SimApiServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reflectors, "LIST_PAGE", 1)
    reflector = reflectors.Reflector(server.json_api(), "/api/v1/nodes", lambda obj: obj, "nodes").start()
    try:
        assert reflector.wait_live(10)
        assert reflector.list_requests == 2
        assert sorted(key for key in (reflectors.object_key(o) for o in reflector.items())) == [("", "node-0"), ("", "node-1")]
    finally:
        reflector.stop()
