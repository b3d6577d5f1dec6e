"""Time NVIDIA discovery + slice rendering + validation on a simulated node.

Usage: python bench/bench_discover.py [--profile dgx-h100] [--partitioning dynamic] [--repeat 30]
Each repetition opens nothing new: it calls discover() on one backend (all
NVML calls go through pynvml into the simulated library), renders the pool
and validates it, the work a node does on every re-publish.
"""

from __future__ import annotations

import argparse
import statistics
import time

from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.model import render_pool, validate_slices
from dra_driver.backend.interface import BackendSettings
from dra_driver_nvidia.backend import NvidiaBackend


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="dgx-h100")
    parser.add_argument("--partitioning", choices=("static", "dynamic"), default="dynamic")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()

    section = load_profile(args.profile).sections["nvidia"]
    started = time.perf_counter()
    backend = NvidiaBackend.from_profile(section, BackendSettings(node_name="bench-node", partitioning=args.partitioning))
    open_ms = (time.perf_counter() - started) * 1000
    discover_ms, render_ms, validate_ms = [], [], []
    try:
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            inventory = backend.discover()
            t1 = time.perf_counter()
            slices = render_pool(inventory, node_name="bench-node")
            t2 = time.perf_counter()
            validate_slices(slices)
            t3 = time.perf_counter()
            discover_ms.append((t1 - t0) * 1000)
            render_ms.append((t2 - t1) * 1000)
            validate_ms.append((t3 - t2) * 1000)
    finally:
        backend.close()
    total = [a + b + c for a, b, c in zip(discover_ms, render_ms, validate_ms)]
    print(f"profile={args.profile} partitioning={args.partitioning} repeat={args.repeat}")
    print(f"devices={len(inventory.devices)} counter_sets={len(inventory.counter_sets)} slices={len(slices)}")
    print(f"open (parse profile, nvmlInit): {open_ms:.1f} ms")
    for label, values in (("discover", discover_ms), ("render", render_ms), ("validate", validate_ms), ("total", total)):
        print(f"{label:>9}: median {statistics.median(values):7.1f} ms   p90 {percentile(values, 0.9):7.1f} ms")


if __name__ == "__main__":
    main()
