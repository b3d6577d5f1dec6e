"""What the device-plugin guard adds to a prepare: the refusal check, without and with a device plugin on the node.

Without a device plugin of the vendor, the check is a few dictionary look-ups. With one, each prepare asks the
kubelet's PodResources `List` once (a gRPC call on a unix socket, kept-open channel); the kubelet here is the
tests' Python stand-in (tests/node/checks/fake_kubelet.py), which answers slower than the real one. Prints the
median over --repeat runs of --calls checks each, per check.

usage: python bench/bench_device_plugin_guard.py [--profile dgx-h100] [--calls N] [--repeat R]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.node.checks.fake_kubelet import PodResourcesState, pod_resources_server  # noqa: E402

from dra_driver.backend.hardware_profiles import load_profile  # noqa: E402
from dra_driver.model.device import Inventory  # noqa: E402
from dra_driver.node.checks.coexistence import CoexistenceSettings, DevicePluginGuard, Offer  # noqa: E402
from dra_driver.backend.registry import open_backends  # noqa: E402
from dra_driver.backend.interface import BackendSettings  # noqa: E402


def per_check_us(guard: DevicePluginGuard, device: str, calls: int, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            if guard.refusal("nvidia", [device]) is not None:
                raise SystemExit(f"{device} was refused; the bench needs a device the guard lets through")
        runs.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="dgx-h100")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    opened = open_backends(BackendSettings(node_name="node-a"), load_profile(args.profile), ["nvidia"])
    scratch = Path(tempfile.mkdtemp(prefix="dra-bench-guard-", dir="/tmp"))
    try:
        inventory: Inventory = opened.backends[0].discover()
        first, last = inventory.devices[0], inventory.devices[-1]
        socket = scratch / "pod-resources" / "kubelet.sock"
        alone = DevicePluginGuard(CoexistenceSettings(scratch, socket, rescan_interval=3600))
        alone.remember("nvidia", inventory)
        print(f"{'no device plugin on the node':40s} {per_check_us(alone, first.name, args.calls * 20, args.repeat):8.1f} us/prepare")
        held = str(last.attributes["uuid"])
        state = PodResourcesState(allocatable={"nvidia.com/gpu": [held]}, pods=[("ml", "legacy", "main", "nvidia.com/gpu", [held])])
        with pod_resources_server(socket, state):
            split = DevicePluginGuard(CoexistenceSettings(scratch, socket, Offer.parse(first.name), rescan_interval=3600))
            split.remember("nvidia", inventory)
            print(f"{'a device plugin on the node (live List)':40s} {per_check_us(split, first.name, args.calls, args.repeat):8.1f} us/prepare")
            split.close()
    finally:
        opened.close()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
