"""NodePrepareResources latency and throughput over the real unix socket.

The daemon runs as its own process (`dra-driver run --profile dgx-h100`, real
NVIDIA backend over the fake NVML) against the in-process simulated API
server; this script plays the kubelet. Each claim is prepared once (the
first, expensive call: claim GET, config resolution, backend, CDI spec,
two-phase checkpoint) and later unprepared.

The profile has 8 GPUs, so to run 64 claims at once the allocation results
carry adminAccess (the only way the API lets claims share a whole device);
the prepare path is otherwise the same.

Besides latency and throughput it prints the daemon's CPU time per prepared
claim and the bench process's own (kubelet side + API server): on a shared
machine CPU time is a steadier comparison than wall-clock latency.

usage: python bench/bench_prepare.py [--claims N] [--concurrency C ...] [--devices D ...] [--repeat R] [--claim-cache]

With --repeat R every case runs R times (interleaved with the other cases) and
each column shows the median over the runs: on a shared 2-core VM single runs
of the same code differ by 20-30%.

With --claim-cache the daemon serves claims from its LIST+WATCH cache (see
dra_driver/kube/claim_cache.py); the `GETs` column counts the claim GETs the
API server received during the timed prepares (0 = every claim from the cache).

`daemon p50 ms` is the median time inside the daemon's NodePrepareResources handler (claim GET, backend,
CDI spec, checkpoint), from its own Prometheus histogram (histogram_quantile between two scrapes of
--metrics-port, linear inside a bucket); the difference to `p50 ms` is the two gRPC stacks and the bench's
Python kubelet stand-in.

Profiling: with DRA_DRIVER_PROFILE_PREPARE=<file> in the environment the
daemon runs every claim operation under cProfile and writes the summed
stats to <file> when it stops (read them with `python -m pstats <file>`).
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dra_driver.kube import sim_apiserver
from dra_driver.kube.claims import allocated_claim_object
from dra_driver.plugin.kubelet_client import PluginConnection, register
from dra_driver.plugin.sockets import PluginPaths
from dra_driver.vendor import ClaimRef

DRIVER = "gpu.nvidia.com"
NODE = "bench-node"
BENCH_POD_UID = "6f1c2a4e-bench-pod"


def make_claims(server: sim_apiserver.SimApiServer, prefix: str, count: int, devices: int) -> list[ClaimRef]:
    refs = []
    names = [f"gpu-{i}" for i in range(devices)]
    for i in range(count):
        body = allocated_claim_object(f"{prefix}-{i}", "bench", DRIVER, NODE, {"gpu": names}, device_class=DRIVER)
        for result in body["status"]["allocation"]["devices"]["results"]:
            result["adminAccess"] = True
        stored = server.store.put(body)
        refs.append(ClaimRef("bench", stored["metadata"]["name"], stored["metadata"]["uid"]))
    return refs


def timed_call(call, refs: list[ClaimRef]) -> float:
    start = time.perf_counter()
    response = call([refs[0]])
    elapsed = time.perf_counter() - start
    error = getattr(response.claims[refs[0].uid], "error", "")
    if error:
        raise SystemExit(f"claim failed: {error}")
    return elapsed


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (/proc/<pid>/stat fields 14 and 15)."""
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def run_case(
    conn: PluginConnection,
    server: sim_apiserver.SimApiServer,
    concurrency: int,
    devices: int,
    claims: int,
    daemon_pid: int,
    metrics_port: int,
    tag: str = "",
) -> dict[str, float]:
    refs = make_claims(server, f"{tag}c{concurrency}-d{devices}", claims, devices)
    time.sleep(0.5)  # claims are allocated well before the kubelet prepares them; lets a claim cache see them
    gets_before = server.requests[("get", "resourceclaims")]
    buckets_before = latency_buckets(metrics_port)
    with ThreadPoolExecutor(concurrency) as pool:
        daemon_cpu, own_cpu = cpu_s(daemon_pid), time.process_time()
        start = time.perf_counter()
        latencies = list(pool.map(lambda r: timed_call(conn.prepare, [r]), refs))
        wall = time.perf_counter() - start
        daemon_cpu, own_cpu = cpu_s(daemon_pid) - daemon_cpu, time.process_time() - own_cpu
        gets = server.requests[("get", "resourceclaims")] - gets_before
        buckets_after = latency_buckets(metrics_port)
        list(pool.map(lambda r: timed_call(conn.unprepare, [r]), refs))
    latencies.sort()
    return {
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "claims_per_s": len(refs) / wall,
        "daemon_cpu_ms": daemon_cpu / len(refs) * 1000,  # per prepared claim
        "bench_cpu_ms": own_cpu / len(refs) * 1000,  # kubelet side + API server, same cores
        "claim_gets": gets,
        "daemon_p50_ms": histogram_quantile(0.5, buckets_before, buckets_after) * 1000,  # inside the daemon's handler
    }


def filesystem(path: Path) -> str:
    """The type of the filesystem holding `path` (longest mount point prefix in /proc/mounts)."""
    best, kind = "", "unknown"
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount, fstype = line.split()[:3]
        if str(path).startswith(mount.rstrip("/") + "/") and len(mount) > len(best):
            best, kind = mount, fstype
    return kind


def latency_buckets(port: int) -> dict[float, float]:
    """Cumulative counts of the daemon's NodePrepareResources latency histogram (v1), by upper bound in seconds."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("dra_driver_request_duration_seconds_bucket{") and 'method="v1/NodePrepareResources"' in line:
            labels, value = line.rsplit(" ", 1)
            bound = labels.split('le="', 1)[1].split('"', 1)[0]
            buckets[float("inf") if bound == "+Inf" else float(bound)] = float(value)
    return buckets


def histogram_quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float:
    """Prometheus' histogram_quantile over the calls between two scrapes (linear inside a bucket), in seconds."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
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


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=400, help="claims per case (default 400)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64], help="concurrency levels (default 1 16 64)")
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 8], help="devices per claim (default 1 8)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; columns are medians over the runs (default 1)")
    parser.add_argument("--single-instance", action="store_true", help="run without --pod-uid (no rolling-update locks); deploy/ passes --pod-uid")
    parser.add_argument("--claim-cache", action="store_true", help="run the daemon with --claim-cache")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dra-bench-", dir="/tmp"))
    # As on a node: sockets under the kubelet dir (disk), CDI specs and the state dir (checkpoint, locks)
    # on a tmpfs, as /var/run/cdi and /var/run/dra-driver are.
    run_dir = Path(tempfile.mkdtemp(prefix="dra-bench-run-", dir="/dev/shm")) if Path("/dev/shm").is_dir() else work / "run"
    cdi_dir, state_dir = run_dir / "cdi", run_dir / "state"
    print(f"kubelet dir {work} ({filesystem(work)}); CDI specs and state under {run_dir} ({filesystem(run_dir)})")
    server = sim_apiserver.SimApiServer().start()
    metrics_port = free_port()
    command = [
        sys.executable, "-m", "dra_driver.cli.main", "run", "--profile", "dgx-h100", "--vendors", "nvidia",
        "--node-name", NODE, "--api-server", server.url, "--kubelet-dir", str(work / "kubelet"), "--cdi-dir", str(cdi_dir), "--state-dir", str(state_dir),
        "--claim-cache" if args.claim_cache else "--no-claim-cache", "--metrics-port", str(metrics_port),
    ]  # fmt: skip
    if not args.single_instance:
        command += ["--pod-uid", BENCH_POD_UID]  # as deployed: rolling-update mode, claim lock files and the shared lock
    daemon = subprocess.Popen(command)
    try:
        paths = PluginPaths(work / "kubelet", DRIVER, None if args.single_instance else BENCH_POD_UID)
        deadline = time.monotonic() + 30
        while not paths.registration_socket.exists():
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise SystemExit("daemon did not start")
            time.sleep(0.05)
        conn = register(paths.registration_socket)
        make_claims(server, "warm", 1, 1)
        run_case(conn, server, 1, 1, 20, daemon.pid, metrics_port)  # warm-up: imports, connections
        cases = [(devices, concurrency) for devices in args.devices for concurrency in args.concurrency]
        runs: dict[tuple[int, int], list[dict[str, float]]] = {case: [] for case in cases}
        for repeat in range(args.repeat):
            for devices, concurrency in cases:
                runs[(devices, concurrency)].append(run_case(conn, server, concurrency, devices, args.claims, daemon.pid, metrics_port, f"r{repeat}"))
                if os.environ.get("BENCH_TRACE"):
                    print(repeat, devices, concurrency, {k: round(v, 2) for k, v in runs[(devices, concurrency)][-1].items()}, flush=True)
        print(f"{'conc':>4} {'dev/claim':>9} {'p50 ms':>8} {'p99 ms':>8} {'claims/s':>9} {'daemon cpu ms/claim':>20} {'bench cpu ms/claim':>19} {'GETs':>5} {'daemon p50 ms':>14}")
        for devices, concurrency in cases:
            result = {key: statistics.median(run[key] for run in runs[(devices, concurrency)]) for key in runs[(devices, concurrency)][0]}
            print(f"{concurrency:>4} {devices:>9} {result['p50_ms']:>8.2f} {result['p99_ms']:>8.2f} {result['claims_per_s']:>9.0f} {result['daemon_cpu_ms']:>20.2f} {result['bench_cpu_ms']:>19.2f} {result['claim_gets']:>5.0f} {result['daemon_p50_ms']:>14.2f}")
        print(f"daemon RSS: {rss_mib(daemon.pid):.0f} MiB")
        conn.close()
    finally:
        daemon.terminate()
        daemon.wait(15)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
