"""CEL throughput: compile time, per-device conversion, evaluation, and grouped evaluation.

Run: python bench/bench_cel.py  (median CPU time of 3 rounds)
"""

from __future__ import annotations

import statistics
import time

from dra_driver.cel import CelBudgetExceeded, cel_device, compile_selector
from dra_driver.cel.classes import load_device_classes

TYPICAL = (
    'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100") '
    '&& device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'
)


ISSUE_TYPICAL = 'device.driver == "gpu.nvidia.com" && device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'
_TEN = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
EXPENSIVE = (
    f"{_TEN}.all(x, {_TEN}.all(y, {_TEN}.all(z, {_TEN}.all(z2, {_TEN}.all(z3, {_TEN}.all(z4, {_TEN}.all(z5, int('1'.find('[0-9]*')) < 100)))))))"
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


def timed(label: str, count: int, func, repeat: int = 3) -> float:
    """Median CPU time per call over `repeat` rounds of `count` calls (CPU time: the machine is shared)."""
    rounds = []
    for _ in range(repeat):
        start = time.process_time()
        for _ in range(count):
            func()
        rounds.append((time.process_time() - start) / count)
    per_call = statistics.median(rounds)
    print(f"{label:<48} {per_call * 1e6:10.1f} us/op  {1 / per_call:12.0f} op/s (cpu)")
    return per_call


def main() -> None:
    counter = iter(range(10**9))
    timed("compile (uncached, typical selector)", 200, lambda: compile_selector(f"{TYPICAL} && {next(counter)} >= 0"))
    timed("compile (cached)", 20000, lambda: compile_selector(TYPICAL))
    raw = wire_device(0)
    timed("cel_device (8 attributes, 1 capacity)", 5000, lambda: cel_device("gpu.nvidia.com", raw))
    device = cel_device("gpu.nvidia.com", raw)
    selector = compile_selector(TYPICAL)
    timed("evaluate typical 3-clause selector", 5000, lambda: selector.evaluate(device))
    issue = compile_selector(ISSUE_TYPICAL)
    timed("evaluate the issue's typical selector (devices/s)", 20000, lambda: issue.evaluate(device))
    expensive = compile_selector(EXPENSIVE)
    print(f"Kubernetes' 'expensive' case: estimated cost {expensive.max_cost:,}")

    def overrun() -> None:
        try:
            expensive.evaluate(device)
        except CelBudgetExceeded:
            return
        raise AssertionError("the expensive selector did not hit the runtime limit")

    timed("expensive case until the runtime cost limit", 1, overrun)
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
