"""ResourceSlice publishing: cold start until published, API writes, writes per health change, wipe repair.

Runs the real SlicePublisher and kubernetes client against the in-process
simulated API server (real HTTP on 127.0.0.1), with the NVIDIA backend
simulating a hardware profile (default dgx-h100) in static and dynamic
partitioning. If the NVIDIA backend cannot be opened, a synthetic inventory of
the same shape is used and the output says so.

    /tmp/venv/bin/python bench/bench_publish.py [--profile dgx-h100] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from dra_driver.kube.client import make_json_api
from dra_driver.simulation.api_server import SimApiServer
from dra_driver.model.device import CounterConsumption, CounterSet, Device, Inventory
from dra_driver.node.publisher import PublisherOptions, SlicePublisher
from dra_driver.backend.interface import Partitioning

NODE = "bench-node"


@contextmanager
def backend_source(profile: str, partitioning: Partitioning) -> Iterator[tuple[Callable[[Partitioning], Inventory], str, str]]:
    """(inventory source, driver name, where the inventory comes from); the simulated backend is closed on exit."""
    opened = None
    try:
        from dra_driver.backend.hardware_profiles import load_profile
        from dra_driver.backend.registry import open_backends
        from dra_driver.backend.interface import BackendSettings

        opened = open_backends(BackendSettings(node_name=NODE, partitioning=partitioning), load_profile(profile), ["nvidia"])
        reason = "; ".join(str(p) for p in opened.unavailable) or "profile has no nvidia section"
    except Exception as exc:  # the backend is another helper's work; fall back rather than fail
        reason = f"{type(exc).__name__}: {exc}"
    try:
        if opened is not None and opened.backends:
            backend = opened.backends[0]
            yield (lambda _mode: backend.discover()), backend.driver_name, f"NVIDIA backend, profile {profile}"
        else:
            yield (lambda mode: synthetic(mode)), "gpu.nvidia.com", f"SYNTHETIC inventory shaped like dgx-h100 (backend unavailable: {reason})"
    finally:
        if opened is not None:
            opened.close()


def synthetic(partitioning: Partitioning) -> Inventory:
    """8 GPUs; dynamic: 8 counter sets and 25 devices per GPU (1 whole GPU + 24 MIG placements)."""
    devices = [
        Device(name=f"gpu-{i}", attributes={"index": i, "productName": "NVIDIA H100 80GB HBM3"}, capacity={"memory": "81559Mi"}) for i in range(8)
    ]
    if partitioning == "static":
        return Inventory(driver="gpu.nvidia.com", devices=devices)
    sets = [CounterSet(f"gpu-{i}-counter-set", {"memory": "81559Mi", "multiprocessors": "132"}) for i in range(8)]
    for i, device in enumerate(devices):
        device.consumes_counters = [CounterConsumption(sets[i].name, {"memory": "81559Mi", "multiprocessors": "132"})]
    for i in range(8):
        for p in range(24):
            devices.append(
                Device(
                    name=f"gpu-{i}-mig-{p}",
                    attributes={"index": i},
                    consumes_counters=[CounterConsumption(sets[i].name, {"memory": "10Gi", "multiprocessors": "16"})],
                )
            )
    return Inventory(driver="gpu.nvidia.com", devices=devices, counter_sets=sets)


def consistent(server: SimApiServer, driver: str, expected: int) -> bool:
    objs = server.objects("ResourceSlice", spec__nodeName=NODE, spec__driver=driver)
    return len(objs) == expected and len({o["spec"]["pool"]["generation"] for o in objs}) == 1


def run_mode(profile: str, partitioning: Partitioning, repeat: int) -> dict[str, Any]:
    with backend_source(profile, partitioning) as (source, driver, origin):
        cold, writes, slices, devices = [], 0, 0, 0
        health_writes, repair = [], []
        for _ in range(repeat):
            with SimApiServer() as server:
                server.add_node(NODE)
                publisher = SlicePublisher(
                    make_json_api(server.url), NODE, driver, source, PublisherOptions(partitioning=partitioning, debounce=0.0)
                )
                started = time.perf_counter()
                publisher.sync_once()  # discovery + list + writes, as at daemon start
                cold.append(time.perf_counter() - started)
                objs = server.objects("ResourceSlice")
                writes, slices = server.writes(), len(objs)
                devices = sum(len(o["spec"].get("devices") or []) for o in objs)
                target = next(o["spec"]["devices"][0]["name"] for o in objs if o["spec"].get("devices"))
                before = server.writes()
                publisher.set_device_health(target, healthy=False)
                publisher.sync_once()
                health_writes.append(server.writes() - before)
                publisher.start()
                publisher.wait_synced(after=publisher.sync_count)
                server.delete_collection_as_other("ResourceSlice", spec__nodeName=NODE)  # kubelet start
                wiped = time.perf_counter()
                while not consistent(server, driver, slices):
                    time.sleep(0.005)  # polling copies every slice; keep it from competing with the publisher
                repair.append(time.perf_counter() - wiped)
                publisher.stop()
    return {
        "mode": partitioning,
        "origin": origin,
        "slices": slices,
        "devices": devices,
        "writes": writes,
        "cold_ms": statistics.median(cold) * 1000,
        "health_writes": sorted(set(health_writes)),
        "repair_ms": statistics.median(repair) * 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="dgx-h100")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"profile={args.profile} repeat={args.repeat} (medians)")
    print(f"{'mode':8} {'slices':>6} {'devices':>7} {'writes':>6} {'cold start ms':>13} {'health writes':>13} {'wipe repair ms':>14}")
    for mode in ("static", "dynamic"):
        r = run_mode(args.profile, mode, args.repeat)
        print(
            f"{r['mode']:8} {r['slices']:>6} {r['devices']:>7} {r['writes']:>6} {r['cold_ms']:>13.1f} {str(r['health_writes']):>13} "
            f"{r['repair_ms']:>14.1f}   [{r['origin']}]"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
