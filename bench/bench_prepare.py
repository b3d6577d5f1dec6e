"""NodePrepareResources / NodeUnprepareResources latency, throughput and memory over the real unix socket.

The daemon runs as its own process (`dra-driver run --profile P`, the real
backends over their fakes at the lowest layer: NVML, amdsmi, sysfs) against the
in-process simulated API server; this script plays the kubelet. Each claim is
prepared once (the first, expensive call: claim GET, config resolution,
backend, CDI spec, two-phase checkpoint) and later unprepared; both are timed.

With several profiles, one daemon runs per profile (each as its own node) and
the cases of all of them are interleaved, so they are compared under the same
load. Devices come from the ResourceSlices each daemon publishes, per driver (a
mixed-node profile is measured driver by driver):
  - static partitioning: claims share the first D devices through adminAccess
    (the only way the API lets claims share a whole device), so up to --claims
    claims are live at once;
  - dynamic partitioning: a device is a partition the backend creates for the
    claim (a MIG instance, an AMD compute/memory mode), so claims cannot share
    it. The bench picks a set of partitions that can all be prepared at once
    (smallest counter consumption first, each one proven by a prepare while the
    others are held) and runs each case in rounds of as many claims as that set
    holds.

usage: python bench/bench_prepare.py [--profile P [P ...]] [--partitioning static|dynamic] [--claims N]
           [--concurrency C ...] [--devices D ...] [--repeat R] [--claim-cache] [--single-instance]
       python bench/bench_prepare.py --profile P --cycles N [--samples S]   # soak: RSS and open fds

With --repeat R every case runs R times (interleaved with the other cases) and
each column shows the median over the runs: on a shared 2-core VM single runs
of the same code differ by 20-30%.

With --claim-cache the daemon serves claims from its LIST+WATCH cache (see
dra_driver/kube/claim_cache.py); the `GETs` column counts the claim GETs the
API server received during the timed prepares (0 = every claim from the cache).

`daemon p50` is the median time inside the daemon's NodePrepareResources handler (claim GET, backend,
CDI spec, checkpoint), from its own Prometheus histogram (histogram_quantile between two scrapes of
--metrics-bind-address, linear inside a bucket); the difference to `p50` is the two gRPC stacks and the bench's
Python kubelet stand-in.

--cycles N prepares and unprepares N fresh claims one after the other (one device each) and samples
the daemon's RSS and open file descriptors S times on the way; the claims are deleted from the API
server after their cycle so the bench process does not grow either.

Profiling: with PYTHONPATH=bench/call_profiler DRA_DRIVER_PROFILE_PREPARE=<file> in the environment
the daemon runs every claim operation under cProfile and writes the summed
stats to <file> when it exits (read them with `python -m pstats <file>`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.simulation import api_server as sim_apiserver
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.kubelet_client import PluginConnection, register
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.registry import backend_classes
from dra_driver.backend.interface import ClaimRef
from node_layout import SIMULATED, node_dirs

BENCH_POD_UID = "6f1c2a4e-bench-pod"
NAMESPACE = "bench"


@dataclass
class Daemon:
    """One `dra-driver run` process under test (one per --profile, each its own node)."""

    profile: str
    node: str
    process: subprocess.Popen[bytes]
    metrics_port: int  # served on 127.0.0.1 (--metrics-bind-address); 0: off
    kubelet_dir: Path

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass
class Target:
    """One driver of the daemon under test and the devices its claims use."""

    profile: str
    driver: str
    pool: str
    devices: list[str]
    shared: bool  # adminAccess on every result (static); else each device is held by one claim at a time
    conn: PluginConnection
    daemon: Daemon

    def round_size(self, devices_per_claim: int, claims: int) -> int:
        """How many claims can be live at once."""
        return claims if self.shared else max(1, min(claims, len(self.devices) // devices_per_claim))

    def claim_devices(self, slot: int, devices_per_claim: int) -> list[str]:
        if self.shared:
            return self.devices[:devices_per_claim]
        return self.devices[slot * devices_per_claim : (slot + 1) * devices_per_claim]


def make_claim(server: sim_apiserver.SimApiServer, target: Target, name: str, devices: list[str]) -> ClaimRef:
    body = allocated_claim_object(name, NAMESPACE, target.driver, target.pool, {"dev": devices}, device_class=target.driver)
    for result in body["status"]["allocation"]["devices"]["results"]:
        result["adminAccess"] = target.shared
    stored = server.store.put(body)
    return ClaimRef(NAMESPACE, stored["metadata"]["name"], stored["metadata"]["uid"])


def claim_error(response: Any, ref: ClaimRef) -> str:
    return str(getattr(response.claims[ref.uid], "error", ""))


def timed_call(call: Callable[[list[ClaimRef]], Any], ref: ClaimRef) -> float:
    start = time.perf_counter()
    response = call([ref])
    elapsed = time.perf_counter() - start
    error = claim_error(response, ref)
    if error:
        raise SystemExit(f"claim {ref.name} failed: {error}")
    return elapsed


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (/proc/<pid>/stat fields 14 and 15)."""
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def percentile(sorted_values: Sequence[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * q))]


def run_case(target: Target, server: sim_apiserver.SimApiServer, concurrency: int, devices: int, claims: int, tag: str = "") -> dict[str, float]:
    """Prepare `claims` fresh claims at `concurrency`, in rounds of what can be live at once, then unprepare them."""
    prepare_latencies: list[float] = []
    unprepare_latencies: list[float] = []
    wall = daemon_cpu = own_cpu = gets = 0.0
    daemon_pid, metrics_port = target.daemon.pid, target.daemon.metrics_port
    buckets_before = latency_buckets(metrics_port)
    done = 0
    while done < claims:
        size = min(target.round_size(devices, claims), claims - done)
        refs = [
            make_claim(server, target, f"{tag}{target.daemon.node}-c{concurrency}-d{devices}-{done + i}", target.claim_devices(i, devices))
            for i in range(size)
        ]
        # Claims are allocated well before the kubelet prepares them; the pause lets a claim cache see them.
        time.sleep(0.5 if done == 0 else 0.05)
        done += size
        gets_before = server.requests[("get", "resourceclaims")]
        with ThreadPoolExecutor(concurrency) as pool:
            cpu_before, own_before = cpu_s(daemon_pid), time.process_time()
            start = time.perf_counter()
            prepare_latencies += pool.map(lambda r: timed_call(target.conn.prepare, r), refs)
            wall += time.perf_counter() - start
            daemon_cpu += cpu_s(daemon_pid) - cpu_before
            own_cpu += time.process_time() - own_before
            gets += server.requests[("get", "resourceclaims")] - gets_before
            unprepare_latencies += pool.map(lambda r: timed_call(target.conn.unprepare, r), refs)
    buckets_after = latency_buckets(metrics_port)
    prepare_latencies.sort()
    unprepare_latencies.sort()
    return {
        "p50_ms": statistics.median(prepare_latencies) * 1000,
        "p99_ms": percentile(prepare_latencies, 0.99) * 1000,
        "claims_per_s": claims / wall,
        "daemon_cpu_ms": daemon_cpu / claims * 1000,  # per prepared claim
        "bench_cpu_ms": own_cpu / claims * 1000,  # kubelet side + API server, same cores
        "claim_gets": gets,
        "daemon_p50_ms": histogram_quantile(0.5, buckets_before, buckets_after, target.driver) * 1000,
        "unprepare_p50_ms": statistics.median(unprepare_latencies) * 1000,
        "unprepare_p99_ms": percentile(unprepare_latencies, 0.99) * 1000,
    }


def filesystem(path: Path) -> str:
    """The type of the filesystem holding `path` (longest mount point prefix in /proc/mounts)."""
    best, kind = "", "unknown"
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount, fstype = line.split()[:3]
        if str(path).startswith(mount.rstrip("/") + "/") and len(mount) > len(best):
            best, kind = mount, fstype
    return kind


def latency_buckets(port: int) -> dict[tuple[str, float], float]:
    """Cumulative counts of the daemon's NodePrepareResources latency histogram (v1), by driver and upper bound in seconds."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    buckets: dict[tuple[str, float], float] = {}
    for line in text.splitlines():
        if line.startswith("dra_driver_request_duration_seconds_bucket{") and 'method="v1/NodePrepareResources"' in line:
            labels, value = line.rsplit(" ", 1)
            driver = labels.split('driver="', 1)[1].split('"', 1)[0]
            bound = labels.split('le="', 1)[1].split('"', 1)[0]
            buckets[(driver, float("inf") if bound == "+Inf" else float(bound))] = float(value)
    return buckets


def histogram_quantile(q: float, before: dict[tuple[str, float], float], after: dict[tuple[str, float], float], driver: str) -> float:
    """Prometheus' histogram_quantile over one driver's calls between two scrapes (linear inside a bucket), in seconds."""
    bounds = sorted(bound for name, bound in after if name == driver)
    counts = [after[(driver, b)] - before.get((driver, b), 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for bound, cumulative in zip(bounds, counts):
        if cumulative >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(cumulative - below, 1e-12)
        lower, below = bound, cumulative
    return lower


# --- devices from the published pool ------------------------------------------


def published_pool(server: sim_apiserver.SimApiServer, node: str, driver: str, deadline: float) -> list[dict[str, Any]]:
    """The devices of the driver's complete pool on this node, waiting for the daemon to publish it."""
    while time.monotonic() < deadline:
        slices = server.objects("ResourceSlice", spec__nodeName=node, spec__driver=driver)
        if slices:
            generation = max(s["spec"]["pool"]["generation"] for s in slices)
            current = [s for s in slices if s["spec"]["pool"]["generation"] == generation]
            if len(current) == current[0]["spec"]["pool"]["resourceSliceCount"]:
                return current
        time.sleep(0.05)
    raise SystemExit(f"{driver}: no complete pool published for {node}")


def counter_capacity(slices: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    capacity: dict[tuple[str, str], int] = {}
    for item in slices:
        for counter_set in item["spec"].get("sharedCounters") or []:
            for counter, value in (counter_set.get("counters") or {}).items():
                capacity[(counter_set["name"], counter)] = int(_quantity(value["value"]))
    return capacity


def _quantity(text: str) -> float:
    from dra_driver.model.quantity import parse

    return float(parse(text))


def consumption(device: dict[str, Any]) -> dict[tuple[str, str], int]:
    used: dict[tuple[str, str], int] = {}
    for entry in device.get("consumesCounters") or []:
        for counter, value in (entry.get("counters") or {}).items():
            used[(entry["counterSet"], counter)] = int(_quantity(value["value"]))
    return used


def partition_candidates(slices: list[dict[str, Any]]) -> list[str]:
    """Devices that fit together by their counters, smallest consumers first (dynamic partitioning)."""
    capacity = counter_capacity(slices)
    devices = [d for s in slices for d in s["spec"].get("devices") or []]
    devices.sort(key=lambda d: (sum(consumption(d).values()), d["name"]))
    free, chosen = dict(capacity), []
    for device in devices:
        used = consumption(device)
        if all(free.get(key, 0) >= value for key, value in used.items()):
            for key, value in used.items():
                free[key] -= value
            chosen.append(device["name"])
    return chosen


def provable_partitions(server: sim_apiserver.SimApiServer, target: Target, candidates: list[str]) -> list[str]:
    """The candidates that the daemon prepares while all the earlier ones are held (then all released)."""
    held: list[ClaimRef] = []
    kept: list[str] = []
    for index, name in enumerate(candidates):
        ref = make_claim(server, target, f"probe-{target.daemon.node}-{index}", [name])
        if not claim_error(target.conn.prepare([ref]), ref):
            held.append(ref)
            kept.append(name)
    for ref in held:
        timed_call(target.conn.unprepare, ref)
    return kept


def connect_target(server: sim_apiserver.SimApiServer, daemon: Daemon, driver: str, partitioning: str, pod_uid: str | None) -> Target:
    paths = PluginPaths(daemon.kubelet_dir, driver, pod_uid)
    deadline = time.monotonic() + 60
    while not paths.registration_socket.exists():
        if time.monotonic() > deadline or daemon.process.poll() is not None:
            raise SystemExit(f"daemon did not start {driver}")
        time.sleep(0.05)
    conn = register(paths.registration_socket)
    slices = published_pool(server, daemon.node, driver, deadline)
    pool = slices[0]["spec"]["pool"]["name"]
    if partitioning == "static":
        names = [d["name"] for s in slices for d in s["spec"].get("devices") or []]
        return Target(daemon.profile, driver, pool, names, shared=True, conn=conn, daemon=daemon)
    target = Target(daemon.profile, driver, pool, [], shared=False, conn=conn, daemon=daemon)
    target.devices = provable_partitions(server, target, partition_candidates(slices))
    if not target.devices:
        raise SystemExit(f"{driver}: no partition could be prepared")
    return target


# --- the two modes --------------------------------------------------------------


def run_cases(args: argparse.Namespace, targets: list[Target], server: sim_apiserver.SimApiServer) -> None:
    for target in targets:
        run_case(target, server, 1, 1, 20, "warm-")  # imports, connections
    cases = [(target, devices, concurrency) for devices in args.devices for concurrency in args.concurrency for target in targets]
    cases = [case for case in cases if case[1] <= len(case[0].devices)]
    runs: dict[int, list[dict[str, float]]] = {i: [] for i in range(len(cases))}
    for repeat in range(args.repeat):  # interleaved: every target sees the same load
        for i, (target, devices, concurrency) in enumerate(cases):
            runs[i].append(run_case(target, server, concurrency, devices, args.claims, f"r{repeat}-"))
            if os.environ.get("BENCH_TRACE"):
                print(repeat, target.driver, devices, concurrency, {k: round(v, 2) for k, v in runs[i][-1].items()}, flush=True)
    print(
        f"{'profile':>12} {'driver':>16} {'conc':>4} {'dev':>3} {'live':>4} {'p50 ms':>7} {'p99 ms':>7} {'claims/s':>8} {'cpu ms':>7} "
        f"{'bench cpu':>9} {'GETs':>5} {'daemon p50':>10} {'unprep p50':>10} {'unprep p99':>10}"
    )
    for i, (target, devices, concurrency) in enumerate(cases):
        r = {key: statistics.median(run[key] for run in runs[i]) for key in runs[i][0]}
        live = target.round_size(devices, args.claims)
        print(
            f"{target.profile:>12} {target.driver:>16} {concurrency:>4} {devices:>3} {live:>4} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} "
            f"{r['claims_per_s']:>8.0f} "
            f"{r['daemon_cpu_ms']:>7.2f} {r['bench_cpu_ms']:>9.2f} {r['claim_gets']:>5.0f} {r['daemon_p50_ms']:>10.2f} "
            f"{r['unprepare_p50_ms']:>10.2f} {r['unprepare_p99_ms']:>10.2f}"
        )
    for daemon in {target.daemon.pid: target.daemon for target in targets}.values():
        print(f"{daemon.profile}: daemon RSS {rss_mib(daemon.pid):.0f} MiB, open fds {open_fds(daemon.pid)}")


def run_cycles(args: argparse.Namespace, target: Target, server: sim_apiserver.SimApiServer) -> None:
    """Prepare+unprepare `--cycles` fresh one-device claims in a row; sample RSS and fds on the way."""
    daemon = target.daemon
    every = max(1, args.cycles // args.samples)
    print(f"{'cycle':>7} {'RSS MiB':>8} {'fds':>5} {'prepare p50 ms':>15} {'daemon p50 ms':>14} {'daemon cpu ms/cycle':>20}")
    print(f"{0:>7} {rss_mib(daemon.pid):>8.1f} {open_fds(daemon.pid):>5}")
    block: list[float] = []
    buckets, cpu = latency_buckets(daemon.metrics_port), cpu_s(daemon.pid)
    for cycle in range(1, args.cycles + 1):
        ref = make_claim(server, target, f"cycle-{cycle}", target.claim_devices(0, 1))
        block.append(timed_call(target.conn.prepare, ref))
        timed_call(target.conn.unprepare, ref)
        server.store.remove("ResourceClaim", ref.name, NAMESPACE)
        if cycle % every == 0:
            now_buckets, now_cpu = latency_buckets(daemon.metrics_port), cpu_s(daemon.pid)
            daemon_p50 = histogram_quantile(0.5, buckets, now_buckets, target.driver) * 1000
            print(
                f"{cycle:>7} {rss_mib(daemon.pid):>8.1f} {open_fds(daemon.pid):>5} {statistics.median(block) * 1000:>15.2f} "
                f"{daemon_p50:>14.2f} {(now_cpu - cpu) / len(block) * 1000:>20.2f}"
            )
            block, buckets, cpu = [], now_buckets, now_cpu


# `--profile host` runs the daemon on this machine's real hardware (no --profile): real NVML,
# amdsmi or sysfs and the host's driver files, everything else as in the simulated runs.
HOST = "host"


def drivers_of(profile: str) -> list[str]:
    classes = backend_classes()
    if profile == HOST:
        return [backend.driver_name for backend in classes.values()]
    return [classes[vendor].driver_name for vendor in load_profile(profile).sections if vendor in classes]


def serving_drivers(daemon: Daemon, pod_uid: str | None) -> list[str]:
    """The profile's drivers; on the host, those whose hardware the daemon found (it registers only those)."""
    drivers = drivers_of(daemon.profile)
    if daemon.profile != HOST:
        return drivers
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and daemon.process.poll() is None:
        found = [d for d in drivers if PluginPaths(daemon.kubelet_dir, d, pod_uid).registration_socket.exists()]
        if found:
            time.sleep(1)  # the other backends open in the same start-up
            return [d for d in drivers if PluginPaths(daemon.kubelet_dir, d, pod_uid).registration_socket.exists()]
        time.sleep(0.05)
    raise SystemExit("the daemon found no accelerator on this host")


def profile_args(profile: str) -> list[str]:
    return [] if profile == HOST else ["--profile", profile, *SIMULATED]


def start_daemon(
    args: argparse.Namespace, index: int, profile: str, server: sim_apiserver.SimApiServer, work: Path, run_dir: Path, pod_uid: str | None
) -> Daemon:
    node = f"bench-node-{index}"
    server.add_node(node)
    kubelet_dir, cdi_dir, state_dir = work / f"kubelet-{index}", run_dir / f"cdi-{index}", run_dir / f"state-{index}"
    metrics_port = free_port()
    node_dirs(kubelet_dir, cdi_dir)
    command = [
        sys.executable, "-m", "dra_driver.cli.main", "run", *profile_args(profile), "--partitioning", args.partitioning,
        "--node-name", node, "--api-server", server.url, "--kubelet-dir", str(kubelet_dir), "--cdi-dir", str(cdi_dir), "--state-dir", str(state_dir),
        "--claim-cache" if args.claim_cache else "--no-claim-cache", "--metrics-bind-address", f"127.0.0.1:{metrics_port}",
    ] + (["--pod-uid", pod_uid] if pod_uid else [])  # fmt: skip
    return Daemon(profile, node, subprocess.Popen(command), metrics_port, kubelet_dir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--profile",
        nargs="+",
        default=["dgx-h100"],
        help="hardware profiles, one daemon each, cases interleaved (default dgx-h100); `host`: this machine's real hardware",
    )
    parser.add_argument("--partitioning", choices=("static", "dynamic"), default="static")
    parser.add_argument("--claims", type=int, default=400, help="claims per case (default 400)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64], help="concurrency levels (default 1 16 64)")
    parser.add_argument(
        "--devices",
        type=int,
        nargs="+",
        default=[1, 8],
        help="devices per claim (default 1 8; cases needing more devices than the pool has are skipped)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; columns are medians over the runs (default 1)")
    parser.add_argument("--single-instance", action="store_true", help="run without --pod-uid (no rolling-update locks); deploy/ passes --pod-uid")
    parser.add_argument("--claim-cache", action="store_true", help="run the daemon with --claim-cache")
    parser.add_argument(
        "--cycles", type=int, default=0, help="soak mode: this many prepare/unprepare cycles of the first driver, RSS and fds sampled"
    )
    parser.add_argument("--samples", type=int, default=10, help="soak mode: RSS/fd samples (default 10)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dra-bench-", dir="/tmp"))
    # As on a node: sockets under the kubelet dir (disk), CDI specs and the state dir (checkpoint, locks)
    # on a tmpfs, as /var/run/cdi and /var/run/dra-driver are.
    run_dir = Path(tempfile.mkdtemp(prefix="dra-bench-run-", dir="/dev/shm")) if Path("/dev/shm").is_dir() else work / "run"
    print(
        f"profiles {' '.join(args.profile)} ({args.partitioning}); kubelet dirs under {work} ({filesystem(work)}); CDI specs and state under "
        f"{run_dir} ({filesystem(run_dir)})"
    )
    server = sim_apiserver.SimApiServer().start()
    pod_uid = None if args.single_instance else BENCH_POD_UID  # as deployed: rolling-update mode, claim lock files and the shared lock
    daemons = [start_daemon(args, i, profile, server, work, run_dir, pod_uid) for i, profile in enumerate(args.profile)]
    targets: list[Target] = []
    try:
        for daemon in daemons:
            for driver in serving_drivers(daemon, pod_uid):
                targets.append(connect_target(server, daemon, driver, args.partitioning, pod_uid))
                print(f"{daemon.profile} {driver}: {len(targets[-1].devices)} {'shared' if targets[-1].shared else 'exclusive'} devices")
        if args.cycles:
            run_cycles(args, targets[0], server)
        else:
            run_cases(args, targets, server)
    finally:
        for target in targets:
            target.conn.close()
        for daemon in daemons:
            daemon.process.terminate()
        for daemon in daemons:
            daemon.process.wait(15)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
