"""API cost and memory of `dra-driver fleet-exporter` at N nodes of slices, against the simulated API server.

Seeds the in-process API server with N DGX H100 nodes (the dgx-h100 profile's slices, one pool per node,
8 GPUs each), their Node objects, the shipped DeviceClasses, --held allocated claims (one GPU each) and
--pending unallocated ones; starts the real `dra-driver fleet-exporter --kubeconfig` as a process and reports:
  - start: requests by verb and resource until the first picture is served (dra_fleet_up and devices);
  - steady: requests by verb during --steady seconds while one claim is allocated and released every
    --churn seconds (watch events only: no LIST, no polling; watch renewals every 5-10 minutes);
  - the exporter's resident memory (VmRSS) and peak (VmHWM), the last picture rebuild (dra_fleet_refresh_seconds),
    and the size of one scrape.

usage: python bench/bench_fleet_exporter.py [--nodes 1000] [--held 2000] [--pending 50] [--steady 60] [--churn 1]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from contextlib import closing
from pathlib import Path

from dra_driver.sources.classes import shipped_class_documents
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.simulation.api_server import SimApiServer
from dra_driver.sources.fleet import simulated

DRIVER = "gpu.nvidia.com"


def free_port() -> int:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:  # noqa: S310 - loopback
            return str(answer.read().decode())
    except OSError:
        return ""


def sample(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def memory_kib(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0])
    return out


def table(counts: Counter[tuple[str, str]], per: float = 1.0) -> str:
    rows = [f"  {verb:6} {resource:16} {count / per:8.2f}" for (verb, resource), count in sorted(counts.items())]
    return "\n".join(rows) or "  (none)"


def claim(name: str, node: int, device: str | None) -> dict[str, object]:
    obj = allocated_claim_object(name, "bench", DRIVER, f"node-{node}", {"gpu": [device or "gpu-0"]}, device_class="gpu.nvidia.com")
    if device is None:
        del obj["status"]
    return obj


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--held", type=int, default=2000, help="allocated claims, one GPU each")
    parser.add_argument("--pending", type=int, default=50, help="unallocated claims")
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of steady state measured")
    parser.add_argument("--churn", type=float, default=1.0, help="seconds between claim changes in steady state (0: none)")
    args = parser.parse_args()

    seeded = time.perf_counter()
    with SimApiServer() as server, tempfile.TemporaryDirectory() as tmp:
        slices = simulated("dgx-h100", args.nodes).slices
        for obj in slices + shipped_class_documents():
            server.store.put(obj)
        for index in range(args.nodes):
            server.add_node(f"node-{index}")
        for index in range(args.held):
            server.store.put(claim(f"held-{index}", index % args.nodes, f"gpu-{(index // args.nodes) % 8}"))
        for index in range(args.pending):
            server.store.put(claim(f"pending-{index}", 0, None))
        print(
            f"seeded {args.nodes} nodes, {len(slices)} slices, {args.held} held + {args.pending} pending claims in "
            f"{time.perf_counter() - seeded:.1f} s"
        )
        server.requests.clear()
        port = free_port()
        kubeconfig = server.write_kubeconfig(Path(tmp) / "kubeconfig")
        log = (Path(tmp) / "exporter.log").open("wb")
        command = [
            sys.executable,
            "-m",
            "dra_driver.cli.main",
            "fleet-exporter",
            "--kubeconfig",
            str(kubeconfig),
            "--metrics-bind-address",
            f"127.0.0.1:{port}",
        ]
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            text = ""
            while sample(text, "dra_fleet_refresh_seconds") in (None, 0.0):
                if process.poll() is not None or time.perf_counter() - started > 600:
                    print(Path(tmp, "exporter.log").read_text()[-3000:])
                    return 1
                time.sleep(0.5)
                text = scrape(port)
            first = time.perf_counter() - started
            start_counts = Counter(server.requests)
            print(
                f"\nstart: first picture served after {first:.1f} s (process start, 4 LISTs, first rebuild "
                f"{sample(text, 'dra_fleet_refresh_seconds'):.2f} s)"
            )
            print(table(start_counts))
            print(f"  memory after start: {memory_kib(process.pid)}")
            server.requests.clear()
            steady_start = time.perf_counter()
            changes = 0
            while time.perf_counter() - steady_start < args.steady:
                if args.churn:
                    name = f"churn-{changes % 2}"
                    if changes % 2 == 0:
                        server.store.put(claim(name, changes % args.nodes, "gpu-7"))
                    else:
                        server.delete_as_other("ResourceClaim", f"churn-{(changes - 1) % 2}", "bench")
                    changes += 1
                    time.sleep(args.churn)
                else:
                    time.sleep(1.0)
            minutes = (time.perf_counter() - steady_start) / 60
            text = scrape(port)
            print(f"\nsteady: {minutes * 60:.0f} s, {changes} claim changes; requests per minute:")
            print(table(Counter(server.requests), minutes))
            print(
                f"  last rebuild {sample(text, 'dra_fleet_refresh_seconds'):.2f} s; one scrape {len(text.encode()) / 1024:.0f} KiB, "
                f"{sum(1 for line in text.splitlines() if line and not line.startswith('#'))} series"
            )
            print(f"  memory: {memory_kib(process.pid)} (KiB)")
        finally:
            process.terminate()
            process.wait(timeout=30)
            log.close()
    print(f"\nload average: {os.getloadavg()[0]:.1f}; cpus: {os.cpu_count()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
