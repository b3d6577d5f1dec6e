"""Cold start of the real daemon until the kubelet could register it and its pool is published.

Starts `dra-driver run --profile dgx-h100` as its own process against the in-process
API server, and measures (wall clock from process start):
  - registered: the registration socket exists and GetInfo answers (what the kubelet needs);
  - published: every slice of the pool is stored with the expected device count;
and counts the API writes it took. Both MIG modes.

usage: python bench/bench_cold_start.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dra_driver.kube import sim_apiserver
from dra_driver.plugin.kubelet_client import register
from dra_driver.plugin.sockets import PluginPaths

DRIVER = "gpu.nvidia.com"
NODE = "bench-node"
EXPECTED_DEVICES = {"static": 8, "dynamic": 208}


def published_devices(server: sim_apiserver.SimApiServer) -> int:
    slices = server.objects("ResourceSlice", spec__nodeName=NODE, spec__driver=DRIVER)
    if not slices:
        return 0
    generation = max(s["spec"]["pool"]["generation"] for s in slices)
    current = [s for s in slices if s["spec"]["pool"]["generation"] == generation]
    if len(current) != current[0]["spec"]["pool"]["resourceSliceCount"]:
        return 0  # pool incomplete
    return sum(len(s["spec"].get("devices") or []) for s in current)


def one_start(partitioning: str) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="dra-cold-", dir="/tmp"))
    server = sim_apiserver.SimApiServer().start()
    server.add_node(NODE)
    command = [
        sys.executable, "-m", "dra_driver.cli.main", "run", "--profile", "dgx-h100", "--vendors", "nvidia",
        "--partitioning", partitioning, "--node-name", NODE, "--api-server", server.url,
        "--kubelet-dir", str(work / "kubelet"), "--cdi-dir", str(work / "cdi"), "--state-dir", str(work / "state"),
    ]  # fmt: skip
    writes_before = server.writes()
    started = time.monotonic()
    daemon = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    registered = published = 0.0
    try:
        paths = PluginPaths(work / "kubelet", DRIVER)
        deadline = started + 60
        while not (registered and published):
            now = time.monotonic()
            if now > deadline or daemon.poll() is not None:
                raise SystemExit(f"daemon did not come up ({partitioning})")
            if not registered and paths.registration_socket.exists():
                register(paths.registration_socket).close()
                registered = time.monotonic() - started
            if not published and published_devices(server) == EXPECTED_DEVICES[partitioning]:
                published = time.monotonic() - started
            time.sleep(0.005)
        time.sleep(0.5)  # let any trailing writes land before counting
        writes = server.writes() - writes_before
    finally:
        daemon.terminate()
        daemon.wait(15)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return {"registered": registered, "published": published, "writes": writes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'mode':>8} {'registered s (median)':>22} {'published s (median)':>21} {'API writes':>11}")
    for mode in ("static", "dynamic"):
        runs = [one_start(mode) for _ in range(args.repeat)]
        print(
            f"{mode:>8} {statistics.median(r['registered'] for r in runs):>22.2f} "
            f"{statistics.median(r['published'] for r in runs):>21.2f} {sorted({int(r['writes']) for r in runs})!s:>11}"
        )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
