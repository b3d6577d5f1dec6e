"""Idle connections to the metrics endpoint: the daemon's threads and memory, and prepare while they are held.

The daemon runs as its own process (`dra-driver run --profile P --metrics-bind-address 127.0.0.1:PORT`) against
the in-process simulated API server; this script plays the kubelet and a crowd of clients that connect to the
metrics port and send nothing. It reports the daemon's thread count and RSS (from /proc) before and after N
idle connections (before: after a warm-up of prepares, so thread pools have grown to what prepare uses), and the
median prepare+unprepare time of one claim over R rounds without and with them held.

usage: python bench/bench_metrics_idle.py [--profile t4] [--connections 1000] [--rounds 30]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dra_driver.simulation import api_server as sim_apiserver
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.kubelet_client import PluginConnection, register
from dra_driver.backend.interface import ClaimRef
from node_layout import SIMULATED, node_dirs

NODE = "bench-node"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def proc_status(pid: int) -> tuple[int, int]:
    """(threads, RSS in KiB) of a process."""
    values = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(values["Threads"]), int(values["VmRSS"].split()[0])


def cycle_ms(conn: PluginConnection, server: sim_apiserver.SimApiServer, driver: str, device: str, rounds: int) -> float:
    times = []
    for i in range(rounds):
        stored = server.store.put(allocated_claim_object(f"c{i}-{time.monotonic_ns()}", "default", driver, NODE, {"gpu": [device]}))
        ref = ClaimRef("default", stored["metadata"]["name"], stored["metadata"]["uid"])
        start = time.perf_counter()
        assert conn.prepare([ref]).claims[ref.uid].error == ""
        assert conn.unprepare([ref]).claims[ref.uid].error == ""
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="t4")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.connections + 256)), hard))
    work = Path(tempfile.mkdtemp(prefix="dra-bench-idle-", dir="/tmp"))
    port = free_port()
    held: list[socket.socket] = []
    with sim_apiserver.SimApiServer() as server:
        server.add_node(NODE)
        node_dirs(work / "k", work / "c")
        command = [sys.executable, "-m", "dra_driver.cli.main", "run", "--profile", args.profile, *SIMULATED, "--node-name", NODE,
                   "--api-server", server.url, "--kubelet-dir", str(work / "k"), "--cdi-dir", str(work / "c"),
                   "--state-dir", str(work / "s"), "--pod-uid", "bench", "--metrics-bind-address", f"127.0.0.1:{port}"]  # fmt: skip
        daemon = subprocess.Popen(command, env={**os.environ, "TMPDIR": str(work)})
        try:
            sockets = sorted((work / "k" / "plugins_registry").glob("*.sock")) if (work / "k" / "plugins_registry").exists() else []
            deadline = time.monotonic() + 120
            while not sockets:
                assert daemon.poll() is None and time.monotonic() < deadline, "the daemon did not start"
                time.sleep(0.05)
                sockets = sorted((work / "k" / "plugins_registry").glob("*.sock")) if (work / "k" / "plugins_registry").exists() else []
            conn = register(sockets[0])
            driver = conn.info.name
            while not (devices := [d["name"] for o in server.store.list("resourceslices") for d in o["spec"]["devices"]]):
                time.sleep(0.05)
            time.sleep(1.0)  # settle: publisher and readiness threads started
            without = cycle_ms(conn, server, driver, devices[0], args.rounds)  # also warms the gRPC and prepare thread pools
            threads_before, rss_before = proc_status(daemon.pid)
            for _ in range(args.connections):
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                held.append(sock)
            time.sleep(1.0)
            threads_after, rss_after = proc_status(daemon.pid)
            held_ms = cycle_ms(conn, server, driver, devices[0], args.rounds)
            conn.close()
        finally:
            for sock in held:
                sock.close()
            daemon.terminate()
            daemon.wait(60)
            shutil.rmtree(work, ignore_errors=True)
    print(f"profile {args.profile}, {args.connections} idle connections to the metrics port")
    print(f"daemon threads: {threads_before} -> {threads_after}")
    print(f"daemon RSS: {rss_before / 1024:.1f} MiB -> {rss_after / 1024:.1f} MiB ({(rss_after - rss_before) / 1024:+.1f} MiB)")
    print(f"prepare+unprepare of one claim, median of {args.rounds}: {without:.2f} ms without, {held_ms:.2f} ms with them held")
    return 0


if __name__ == "__main__":
    sys.exit(main())
