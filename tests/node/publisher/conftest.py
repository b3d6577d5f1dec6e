"""Fixtures: a simulated API server with a Node, and synthetic inventories of a given shape."""

from __future__ import annotations

import functools

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests import support
from dra_driver.kube.client import JsonApi, make_json_api
from dra_driver.simulation.api_server import SimApiServer
from dra_driver.model.device import CounterConsumption, CounterSet, Device, Inventory
from dra_driver.node.publisher import PublisherOptions, SlicePublisher
from dra_driver.backend.interface import Partitioning

DRIVER = "gpu.example.com"
NODE = "node-a"
FAST = PublisherOptions(backoff_initial=0.01, backoff_cap=0.1, debounce=0.01, watch_timeout=30)


def make_inventory(count: int, driver: str = DRIVER, partitioning: Partitioning = "static", model: str = "H100") -> Inventory:
    """`count` whole GPUs; with dynamic partitioning also one counter set and one partition device per GPU."""
    devices = [Device(name=f"gpu-{i}", attributes={"index": i, "model": model}, capacity={"memory": "80Gi"}) for i in range(count)]
    if partitioning == "static":
        return Inventory(driver=driver, devices=devices)
    counter_sets = [CounterSet(name=f"gpu-{i}-counters", counters={"memory": "80Gi"}) for i in range(count)]
    for i, device in enumerate(devices):
        device.consumes_counters = [CounterConsumption(f"gpu-{i}-counters", {"memory": "80Gi"})]
    partitions = [
        Device(
            name=f"gpu-{i}-mig-1g",
            attributes={"index": i},
            capacity={"memory": "10Gi"},
            consumes_counters=[CounterConsumption(f"gpu-{i}-counters", {"memory": "10Gi"})],
        )
        for i in range(count)
    ]
    return Inventory(driver=driver, devices=devices + partitions, counter_sets=counter_sets)


class Source:
    """An inventory source whose shape the test can change; records what it was asked."""

    def __init__(self, count: int, driver: str = DRIVER) -> None:
        self.count = count
        self.driver = driver
        self.model = "H100"
        self.asked: list[str] = []

    def __call__(self, partitioning: Partitioning) -> Inventory:
        self.asked.append(partitioning)
        return make_inventory(self.count, self.driver, partitioning, self.model)


@pytest.fixture
def server() -> Iterator[SimApiServer]:
    with SimApiServer() as srv:
        srv.add_node(NODE)
        yield srv


@pytest.fixture
def api_client(server: SimApiServer) -> JsonApi:
    return make_json_api(server.url)


@pytest.fixture
def make_publisher(api_client: JsonApi) -> Iterator[Callable[..., SlicePublisher]]:
    started: list[SlicePublisher] = []

    def build(
        source: Any, options: PublisherOptions = FAST, node: str = NODE, driver: str = DRIVER, api: JsonApi | None = None
    ) -> SlicePublisher:
        publisher = SlicePublisher(api or api_client, node, driver, source, options)
        started.append(publisher)
        return publisher

    yield build
    for publisher in started:
        publisher.stop()


def slices(server: SimApiServer, node: str = NODE, driver: str = DRIVER) -> list[dict[str, Any]]:
    return server.objects("ResourceSlice", spec__nodeName=node, spec__driver=driver)


def device_names(objs: list[dict[str, Any]]) -> set[str]:
    return {d["name"] for o in objs for d in o["spec"].get("devices") or []}


def pool_consistent(objs: list[dict[str, Any]], expected_devices: set[str]) -> bool:
    """Every slice at one generation, count right, and exactly the expected devices."""
    generations = {o["spec"]["pool"]["generation"] for o in objs}
    counts = {o["spec"]["pool"]["resourceSliceCount"] for o in objs}
    return len(generations) == 1 and counts == {len(objs)} and device_names(objs) == expected_devices


# The slices are read while the publisher rewrites them: a read that fails mid-change is "not yet".
eventually = functools.partial(support.eventually, tolerate_errors=True)
