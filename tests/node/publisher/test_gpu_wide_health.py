"""A GPU-wide health event (XID, GPU lost) taints every partition of that GPU: still one slice write."""

from __future__ import annotations

from typing import Any

from dra_driver.simulation.api_server import SimApiServer
from dra_driver.model import CounterConsumption, CounterSet, Device, DeviceTaint, Inventory
from tests.node.publisher.conftest import DRIVER, FAST, slices

PARTITIONS_PER_GPU = 26  # what dynamic MIG publishes per H100 (full GPU + every placement)


def dynamic_like_inventory(_partitioning: Any = None) -> Inventory:
    counter_sets = [CounterSet(name=f"gpu-{g}-counter-set", counters={"memory-slice-0": "1"}) for g in range(8)]
    devices = [
        Device(
            name=f"gpu-{g}-part-{p}",
            attributes={"index": g},
            consumes_counters=[CounterConsumption(f"gpu-{g}-counter-set", {"memory-slice-0": "1"})],
        )
        for g in range(8)
        for p in range(PARTITIONS_PER_GPU)
    ]
    return Inventory(driver=DRIVER, devices=devices, counter_sets=counter_sets)


def test_all_partitions_of_one_gpu_tainted_cost_one_write(server: SimApiServer, make_publisher: Any) -> None:
    publisher = make_publisher(dynamic_like_inventory, options=FAST.__class__(**{**FAST.__dict__, "partitioning": "dynamic"}))
    publisher.sync_once()
    before = server.writes()
    taint = DeviceTaint("gpu.example.com/xid", "NoSchedule", "79")
    for p in range(PARTITIONS_PER_GPU):
        publisher.set_device_health(f"gpu-2-part-{p}", healthy=False, taint=taint)
    publisher.sync_once()
    assert server.writes() - before == 1
    tainted = {d["name"] for o in slices(server) for d in o["spec"].get("devices") or [] if d.get("taints")}
    assert tainted == {f"gpu-2-part-{p}" for p in range(PARTITIONS_PER_GPU)}
