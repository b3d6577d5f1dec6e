"""Cost of one device metrics collection (the collector thread's step) and of one scrape that renders it.

The real NVIDIA backend over the simulated NVML: `dgx-h100` (8 GPUs) and the same model repeated to 208 GPUs
(a node far larger than any shipping one, for the worst case of the bound). A quarter of the devices are
held by a claim, so the holder labels are rendered too. Reports the median and max of R collections and of
R scrapes (prometheus_client's text exposition of the whole registry).

The simulated library answers in-process, so this measures the driver's own cost per device (NVML bindings,
sample building, rendering), not the GPU driver's: on a real host each NVML call adds its own time
(scripts/metrics_check.py on the hardware).

usage: python bench/bench_device_metrics.py [--rounds 50]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.backend.interface import BackendSettings
from dra_driver.node.device_metrics import DeviceMetricsCollector, DriverSource
from dra_driver.node.metrics import HeldClaim, Metrics
from dra_driver_nvidia.backend import NvidiaBackend

DRIVER = "gpu.nvidia.com"
NODE = "bench-node"


def section_with(gpus: int) -> dict[str, Any]:
    section = dict(load_profile("dgx-h100").sections["nvidia"])
    template = dict(section["gpus"][0])
    section["gpus"] = [
        {**template, "uuid": f"GPU-{n:08x}-0000-4000-8000-000000000000", "pciBusId": f"00000000:{n // 32:02X}:{n % 32:02X}.0", "minor": n}
        for n in range(gpus)
    ]
    return section


def run(gpus: int, rounds: int) -> None:
    backend = NvidiaBackend.from_profile(section_with(gpus), BackendSettings(node_name=NODE))
    try:
        devices = [device.name for device in backend.discover().devices]
        metrics = Metrics()
        for n, device in enumerate(devices[: len(devices) // 4]):
            metrics.holders.update(DRIVER, f"uid-{n}", HeldClaim(f"uid-{n}", "bench", f"claim-{n}", [(NODE, device)]))
        collector = DeviceMetricsCollector(metrics.holders, 15)
        metrics.add_collector(collector)
        collector.add(DriverSource(DRIVER, NODE, backend, devices))
        collects, scrapes = [], []
        for _ in range(rounds):
            start = time.perf_counter()
            collector.collect_once()
            collects.append(time.perf_counter() - start)
            start = time.perf_counter()
            body = metrics.exposition().body
            scrapes.append(time.perf_counter() - start)
        print(f"{gpus:>4} GPUs: collection median {statistics.median(collects) * 1e3:7.2f} ms, max {max(collects) * 1e3:7.2f} ms; "
              f"scrape median {statistics.median(scrapes) * 1e3:7.2f} ms, max {max(scrapes) * 1e3:7.2f} ms, {len(body) / 1024:.0f} KiB")  # fmt: skip
    finally:
        backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    for gpus in (8, 208):
        run(gpus, args.rounds)


if __name__ == "__main__":
    main()
