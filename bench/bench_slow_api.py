"""NodePrepareResources against a slow API server: is every claim answered before the kubelet's deadline?

The daemon runs as its own process (`dra-driver run --profile dgx-h100`, real
NVIDIA backend over the fake NVML) against the in-process simulated API
server, which answers every ResourceClaim GET only after `--latency` seconds
(`SimApiServer.slow`). This script plays the kubelet: one NodePrepareResources
call with a batch of N claims and the kubelet's deadline (`--deadline`, 45 s).

Before the deadline work each GET was retried by urllib3 with a
fresh 10 s timeout, so a 10 s server cost 40 s per claim, and a batch of more
than 8 claims got no answer at all (DEADLINE_EXCEEDED). Now every claim is
answered before the deadline: the ones whose GET finished are prepared, the
others carry their own error, and the kubelet's retry (next pod sync) is
answered from the checkpoint for the finished ones.

Claims use adminAccess so that more claims than the 8 GPUs can be prepared.

usage: python bench/bench_slow_api.py [--latency S] [--deadline S] [--claims N ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_prepare import Daemon, Target, connect_target, drivers_of, make_claim

from dra_driver.simulation import api_server as sim_apiserver
from node_layout import SIMULATED, node_dirs

PROFILE = "dgx-h100"
NODE = "slow-api-node"


def run_case(target: Target, server: sim_apiserver.SimApiServer, claims: int, latency: float, deadline: float) -> dict[str, float]:
    conn = target.conn
    refs = [make_claim(server, target, f"slow{claims}-{i}", target.devices[:1]) for i in range(claims)]
    server.slow("get", "resourceclaims", latency)
    start = time.perf_counter()
    try:
        response = conn.prepare(refs, timeout=deadline)
    finally:
        server.clear_faults()
    answered = time.perf_counter() - start
    prepared = sum(1 for r in refs if not response.claims[r.uid].error)
    # The kubelet's retry, with the API server quick again: the finished claims come from the checkpoint.
    start = time.perf_counter()
    retry = conn.prepare(refs, timeout=deadline)
    retried = time.perf_counter() - start
    failed_retry = sum(1 for r in refs if retry.claims[r.uid].error)
    conn.unprepare(refs, timeout=deadline)
    return {"answered_s": answered, "prepared": prepared, "errors": claims - prepared, "retry_s": retried, "retry_errors": failed_retry}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=10.0, help="seconds the API server takes per claim GET (default 10)")
    parser.add_argument("--deadline", type=float, default=45.0, help="the kubelet's per-call deadline (default 45)")
    parser.add_argument("--claims", type=int, nargs="+", default=[24, 64], help="claims per NodePrepareResources call")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dra-slow-", dir="/tmp"))
    server = sim_apiserver.SimApiServer().start()
    server.add_node(NODE)
    node_dirs(work / "kubelet", work / "cdi")
    command = [
        sys.executable, "-m", "dra_driver.cli.main", "run", "--profile", PROFILE, *SIMULATED, "--vendors", "nvidia", "--node-name", NODE,
        "--api-server", server.url, "--kubelet-dir", str(work / "kubelet"), "--cdi-dir", str(work / "cdi"), "--state-dir", str(work / "state"),
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    daemon = Daemon(PROFILE, NODE, process, metrics_port=0, kubelet_dir=work / "kubelet")
    try:
        # Static partitioning: the 8 GPUs, shared through adminAccess, so a batch may hold more claims than GPUs.
        target = connect_target(server, daemon, drivers_of(PROFILE)[0], "static", None)
        print(f"API server latency {args.latency} s per GET, kubelet deadline {args.deadline} s")
        print(f"{'claims':>6} {'answered after s':>17} {'prepared':>9} {'errors':>7} {'retry s':>8} {'retry errors':>13}")
        for claims in args.claims:
            r = run_case(target, server, claims, args.latency, args.deadline)
            print(
                f"{claims:>6} {r['answered_s']:>17.1f} {r['prepared']:>9.0f} {r['errors']:>7.0f} {r['retry_s']:>8.2f} {r['retry_errors']:>13.0f}",
                flush=True,
            )
        target.conn.close()
    finally:
        process.terminate()
        process.wait(30)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
