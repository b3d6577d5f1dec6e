"""CEL throughput: compile time, per-device conversion, evaluation, and grouped evaluation.

Run: /tmp/venv/bin/python bench/bench_cel.py
"""

from __future__ import annotations

import time

from dra_driver.cel import cel_device, compile_selector
from dra_driver.cel.classes import load_device_classes

TYPICAL = (
    'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100") '
    '&& device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'
)


def wire_device(i: int) -> dict:
    return {
        "name": f"gpu-{i}",
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "uuid": {"string": f"GPU-{i:08d}"},
            "index": {"int": i % 8},
            "driverVersion": {"version": "550.54.15"},
            "dra-driver.io/family": {"string": "hopper"},
            "dra-driver.io/partition": {"bool": False},
            "dra-driver.io/interconnect": {"string": "nvlink"},
        },
        "capacity": {"memory": {"value": "81559Mi"}},
    }


def timed(label: str, count: int, func) -> float:
    start = time.perf_counter()
    for _ in range(count):
        func()
    elapsed = time.perf_counter() - start
    print(f"{label:<48} {elapsed / count * 1e6:10.1f} us/op  {count / elapsed:12.0f} op/s")
    return elapsed


def main() -> None:
    counter = iter(range(10**9))
    timed("compile (uncached, typical selector)", 200, lambda: compile_selector(f"{TYPICAL} && {next(counter)} >= 0"))
    timed("compile (cached)", 20000, lambda: compile_selector(TYPICAL))
    raw = wire_device(0)
    timed("cel_device (8 attributes, 1 capacity)", 5000, lambda: cel_device("gpu.nvidia.com", raw))
    device = cel_device("gpu.nvidia.com", raw)
    selector = compile_selector(TYPICAL)
    timed("evaluate typical 3-clause selector", 5000, lambda: selector.evaluate(device))
    classes = load_device_classes()
    shipped = [s for c in classes.values() for s in c.compiled()]
    timed(f"evaluate all {len(shipped)} shipped class selectors", 200, lambda: [s.evaluate(device) for s in shipped])

    fleet = [cel_device("gpu.nvidia.com", wire_device(i)) for i in range(10_000)]
    start = time.perf_counter()
    for d in fleet:
        selector.evaluate(d)
    plain = time.perf_counter() - start
    start = time.perf_counter()
    results: dict[object, bool] = {}
    for d in fleet:
        key = selector.group_key(d)
        if key not in results:
            results[key] = selector.evaluate(d)
    grouped = time.perf_counter() - start
    print(f"10,000 devices, one selector: per device {plain * 1e3:.0f} ms, grouped by referenced keys {grouped * 1e3:.0f} ms ({len(results)} groups)")


if __name__ == "__main__":
    main()
