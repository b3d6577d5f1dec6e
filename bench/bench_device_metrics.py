"""Cost of one device metrics collection (the collector thread's step) and of one scrape that renders it.

Default: the real NVIDIA backend over the simulated NVML, `dgx-h100` (8 GPUs) and the same model repeated to
208 GPUs (a node far larger than any shipping one, for the worst case of the bound). With --profile NAME, each
vendor the profile describes instead, through its real backend over its simulated lowest layer (amdsmi module,
HLML library and sysfs tree), e.g. mi300x, mi300x-cpx (64 partitions), gaudi3-hls. A quarter of the devices
are held by a claim, so the holder labels are rendered too. Reports the median and max of R collections and
of R scrapes (the text exposition of the whole registry, dra_driver/common/prometheus_text.py).

The simulated libraries answer in-process, so this measures the driver's own cost per device (bindings,
sample building, rendering), not the vendor driver's: on a real host each library call adds its own time
(scripts/metrics_check.py on NVIDIA hardware).

usage: python bench/bench_device_metrics.py [--rounds 50] [--profile NAME ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.backend.interface import BackendSettings, VendorBackend
from dra_driver.backend.registry import open_backends
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


def measure(label: str, backend: VendorBackend, rounds: int) -> None:
    driver = backend.driver_name
    devices = [device.name for device in backend.discover().devices]
    metrics = Metrics()
    for n, device in enumerate(devices[: len(devices) // 4]):
        metrics.holders.update(driver, f"uid-{n}", HeldClaim(f"uid-{n}", "bench", f"claim-{n}", [(NODE, device)]))
    collector = DeviceMetricsCollector(metrics.holders, 15)
    metrics.add_collector(collector)
    collector.add(DriverSource(driver, NODE, backend, devices))
    collects, scrapes = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        collector.collect_once()
        collects.append(time.perf_counter() - start)
        start = time.perf_counter()
        body = metrics.exposition().body
        scrapes.append(time.perf_counter() - start)
    print(f"{label}, {len(devices):>4} devices: collection median {statistics.median(collects) * 1e3:7.2f} ms, max {max(collects) * 1e3:7.2f} ms; "
          f"scrape median {statistics.median(scrapes) * 1e3:7.2f} ms, max {max(scrapes) * 1e3:7.2f} ms, {len(body) / 1024:.0f} KiB")  # fmt: skip


def run(gpus: int, rounds: int) -> None:
    backend = NvidiaBackend.from_profile(section_with(gpus), BackendSettings(node_name=NODE))
    try:
        measure(f"dgx-h100 x{gpus // 8}", backend, rounds)
    finally:
        backend.close()


def run_profile(name: str, rounds: int) -> None:
    opened = open_backends(BackendSettings(node_name=NODE), profile=load_profile(name))
    try:
        for failure in opened.unavailable:
            print(f"{name}: {failure}")
        for backend in opened.backends:
            measure(f"{name} ({backend.vendor})", backend, rounds)
    finally:
        opened.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--profile", action="append", default=[], help="a hardware profile (repeatable); default: dgx-h100 at 8 and 208 GPUs")
    args = parser.parse_args()
    for name in args.profile:
        run_profile(name, args.rounds)
    if not args.profile:
        for gpus in (8, 208):
            run(gpus, args.rounds)


if __name__ == "__main__":
    main()
