from __future__ import annotations

import pytest

from dra_driver.model import CounterConsumption, CounterSet, Device, DeviceTaint, Inventory, Version


def make_device(name: str, **extra: object) -> Device:
    device = Device(
        name=name,
        attributes={"type": "gpu", "index": 0, "healthy": True, "driverVersion": Version("580.159.4")},
        capacity={"memory": "81559Mi"},
    )
    for key, value in extra.items():
        setattr(device, key, value)
    return device


@pytest.fixture
def plain_inventory() -> Inventory:
    return Inventory(driver="gpu.example.com", devices=[make_device(f"gpu-{i}") for i in range(3)])


@pytest.fixture
def partitioned_inventory() -> Inventory:
    counter_sets = [CounterSet(name=f"gpu-{i}-counters", counters={"memory": "80Gi", "slices": "7"}) for i in range(10)]
    devices = [
        make_device(
            f"gpu-{i}-part-{j}",
            consumes_counters=[CounterConsumption(counter_set=f"gpu-{i}-counters", counters={"slices": "1"})],
        )
        for i in range(10)
        for j in range(7)
    ]
    return Inventory(driver="gpu.example.com", devices=devices, counter_sets=counter_sets)


__all__ = ["make_device", "DeviceTaint"]
