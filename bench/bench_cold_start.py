"""Cold start of the real daemon until the kubelet could register it and its pool is published.

Starts `dra-driver run --profile dgx-h100` as its own process against the in-process
API server, and measures (wall clock from process start):
  - registered: the registration socket answers GetInfo and the DRA socket it names accepts a
    connection (what the kubelet needs before it can call NodePrepareResources);
  - cpu at reg.: the daemon's own CPU time (user + system) when its registration socket
    appears, the figure a busy machine distorts least (10 ms resolution);
  - first prepare: a claim created beforehand is prepared right after registration (the
    daemon builds its API client after the sockets serve; a prepare in that gap waits for it);
  - published: every slice of the pool is stored with the expected device count;
and counts the API writes it took. Both MIG modes.

With --claims N (static mode) the daemon restarts with N claims prepared by an earlier daemon of the
same node (stopped with SIGTERM, as a rolling restart does): "serving" is the first repeated prepare
answered (the kubelet prepares its claims again after a plugin restart), "all answered" every one of
the N answered again (each checked against what the first daemon answered), and the daemon's RSS is
read when they are; "KiB/claim" is that RSS less the RSS of a start without claims, per claim.

As in the driver's image (pip compiles every module when it installs the wheel), the
project's own modules are byte-compiled first: a checkout with PYTHONDONTWRITEBYTECODE
set would otherwise compile them from source on every start.

usage: python bench/bench_cold_start.py [--repeat N] [--profile P] [--claims N]
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from dra_driver.api.pluginregistration.v1 import api_pb2 as reg_pb2
from dra_driver.api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from dra_driver.simulation import api_server as sim_apiserver
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.kubelet_client import PluginConnection, register
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import ClaimRef
from node_layout import SIMULATED, node_dirs

DRIVER = "gpu.nvidia.com"
NODE = "bench-node"
EXPECTED_DEVICES = {"static": 8, "dynamic": 208}
PACKAGES = ("dra_driver", "dra_driver_nvidia", "dra_driver_amd", "dra_driver_gaudi")


def byte_compile() -> None:
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            for location in spec.submodule_search_locations:
                compileall.compile_dir(location, quiet=1)


def cpu_s(pid: int) -> float:
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def published_devices(server: sim_apiserver.SimApiServer) -> int:
    slices = server.objects("ResourceSlice", spec__nodeName=NODE, spec__driver=DRIVER)
    if not slices:
        return 0
    generation = max(s["spec"]["pool"]["generation"] for s in slices)
    current = [s for s in slices if s["spec"]["pool"]["generation"] == generation]
    if len(current) != current[0]["spec"]["pool"]["resourceSliceCount"]:
        return 0  # pool incomplete
    return sum(len(s["spec"].get("devices") or []) for s in current)


def answer_info(registration_socket: Path) -> None:
    """One GetInfo, as the kubelet's plugin watcher sends first when the socket appears."""
    with grpc.insecure_channel(f"unix://{registration_socket}") as channel:
        reg_grpc.RegistrationStub(channel).GetInfo(reg_pb2.InfoRequest(), timeout=10.0, wait_for_ready=True)


def one_start(profile: str, partitioning: str) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="dra-cold-", dir="/tmp"))
    server = sim_apiserver.SimApiServer().start()
    server.add_node(NODE)
    body = allocated_claim_object("first", "default", DRIVER, NODE, {"gpu": ["gpu-0"]}, device_class=DRIVER)
    stored = server.store.put(body)
    claim = ClaimRef("default", "first", stored["metadata"]["uid"])
    node_dirs(work / "kubelet", work / "cdi")
    command = [
        sys.executable, "-m", "dra_driver.cli.main", "run", "--profile", profile, *SIMULATED, "--vendors", "nvidia",
        "--partitioning", partitioning, "--node-name", NODE, "--api-server", server.url,
        "--kubelet-dir", str(work / "kubelet"), "--cdi-dir", str(work / "cdi"), "--state-dir", str(work / "state"),
    ]  # fmt: skip
    writes_before = server.writes()
    started = time.monotonic()
    daemon = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    result = {"socket": 0.0, "answers": 0.0, "registered": 0.0, "cpu": 0.0, "prepared": 0.0, "published": 0.0}
    try:
        paths = PluginPaths(work / "kubelet", DRIVER)
        deadline = started + 60
        while not (result["registered"] and result["published"]):
            now = time.monotonic()
            if now > deadline or daemon.poll() is not None:
                raise SystemExit(f"daemon did not come up ({partitioning})")
            if not result["registered"] and paths.registration_socket.exists():
                result["cpu"] = cpu_s(daemon.pid)  # before it goes on to the API client while we register
                result["socket"] = time.monotonic() - started
                answer_info(paths.registration_socket)
                result["answers"] = time.monotonic() - started  # GetInfo answered: what the kubelet first needs
                conn = register(paths.registration_socket)
                result["registered"] = time.monotonic() - started
                response = conn.prepare([claim])
                result["prepared"] = time.monotonic() - started
                conn.close()
                if response.claims[claim.uid].error:
                    raise SystemExit(f"first prepare failed: {response.claims[claim.uid].error}")
            if not result["published"] and published_devices(server) == EXPECTED_DEVICES[partitioning]:
                result["published"] = time.monotonic() - started
            time.sleep(0.002)
        time.sleep(0.5)  # let any trailing writes land before counting
        result["writes"] = server.writes() - writes_before
    finally:
        daemon.terminate()
        daemon.wait(15)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return result


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def run_command(server: sim_apiserver.SimApiServer, work: Path, profile: str) -> list[str]:
    node_dirs(work / "kubelet", work / "cdi")
    return [
        sys.executable, "-m", "dra_driver.cli.main", "run", "--profile", profile, *SIMULATED, "--vendors", "nvidia",
        "--node-name", NODE, "--api-server", server.url,
        "--kubelet-dir", str(work / "kubelet"), "--cdi-dir", str(work / "cdi"), "--state-dir", str(work / "state"),
    ]  # fmt: skip


def wait_registered(daemon: subprocess.Popen[bytes], paths: PluginPaths, started: float) -> PluginConnection:
    while not paths.registration_socket.exists():
        if daemon.poll() is not None or time.monotonic() > started + 60:
            raise SystemExit("daemon did not come up")
        time.sleep(0.002)
    return register(paths.registration_socket)


def answers(conn: PluginConnection, claims: list[ClaimRef], batch: int = 100) -> dict[str, list[str]]:
    """uid -> CDI device IDs of each claim, prepared in batches (as a kubelet with many pods does)."""
    found: dict[str, list[str]] = {}
    for first in range(0, len(claims), batch):
        response = conn.prepare(claims[first : first + batch])
        for uid, entry in response.claims.items():
            if entry.error:
                raise SystemExit(f"prepare of {uid} failed: {entry.error}")
            found[uid] = sorted(i for device in entry.devices for i in device.cdi_device_ids)
    return found


def restart_with_claims(profile: str, count: int, repeat: int) -> list[dict[str, float]]:
    """Prepare `count` claims with one daemon, stop it, then time `repeat` restarts serving them again."""
    work = Path(tempfile.mkdtemp(prefix="dra-cold-", dir="/tmp"))
    server = sim_apiserver.SimApiServer().start()
    server.add_node(NODE)
    claims = []
    for number in range(count):
        body = allocated_claim_object(f"c{number}", "default", DRIVER, NODE, {"gpu": [f"gpu-{number % 8}"]}, device_class=DRIVER)
        body["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True  # 8 GPUs shared by every claim
        stored = server.store.put(body)
        claims.append(ClaimRef("default", f"c{number}", stored["metadata"]["uid"]))
    paths = PluginPaths(work / "kubelet", DRIVER)
    results = []
    try:
        daemon = subprocess.Popen(run_command(server, work, profile), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        conn = wait_registered(daemon, paths, time.monotonic())
        expected = answers(conn, claims)
        conn.close()
        daemon.terminate()
        daemon.wait(30)
        for _ in range(repeat):
            started = time.monotonic()
            daemon = subprocess.Popen(run_command(server, work, profile), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                conn = wait_registered(daemon, paths, started)
                registered = time.monotonic() - started
                first = answers(conn, claims[:1])
                serving = time.monotonic() - started
                again = {**first, **answers(conn, claims[1:])}
                answered = time.monotonic() - started
                if again != expected:
                    wrong = sorted(uid for uid in expected if again.get(uid) != expected[uid])
                    raise SystemExit(f"{len(wrong)} claims answered differently after the restart, e.g. {wrong[:3]}")
                results.append({"registered": registered, "serving": serving, "answered": answered, "rss": rss_kib(daemon.pid)})
                conn.close()
            finally:
                daemon.terminate()
                daemon.wait(30)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return results


def report_claims(profile: str, count: int, repeat: int) -> None:
    empty = restart_with_claims(profile, 0, repeat)
    loaded = restart_with_claims(profile, count, repeat)
    base = statistics.median(r["rss"] for r in empty)
    print(f"restart with {count} prepared claims (static {profile}), medians of {repeat} (min in brackets), seconds from process start")
    print(f"{'claims':>7} {'registered':>14} {'serving':>14} {'all answered':>14} {'RSS MiB':>8} {'KiB/claim':>9}")
    for number, runs in ((0, empty), (count, loaded)):
        def column(key: str) -> str:
            values = [r[key] for r in runs]
            return f"{statistics.median(values):.3f} ({min(values):.3f})"

        rss = statistics.median(r["rss"] for r in runs)
        per_claim = f"{(rss - base) / number:.1f}" if number else "-"
        print(f"{number:>7} {column('registered'):>14} {column('serving'):>14} {column('answered'):>14} {rss / 1024:>8.1f} {per_claim:>9}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", default="dgx-h100", help="an NVIDIA profile (default dgx-h100: 8 GPUs, 208 devices when dynamic)")
    parser.add_argument("--modes", nargs="+", default=["static", "dynamic"], choices=("static", "dynamic"))
    parser.add_argument("--claims", type=int, default=0, help="restart with this many prepared claims instead (static)")
    args = parser.parse_args()
    byte_compile()
    if args.claims:
        report_claims(args.profile, args.claims, args.repeat)
        return 0
    print(f"medians of {args.repeat} starts (min in brackets), seconds from process start")
    print(
        f"{'mode':>8} {'socket':>14} {'answers':>14} {'registered':>14} {'cpu at reg.':>14} {'first prepare':>14} {'published':>14} "
        f"{'API writes':>11}"
    )
    for mode in args.modes:
        runs = [one_start(args.profile, mode) for _ in range(args.repeat)]

        def column(key: str) -> str:
            values = [r[key] for r in runs]
            return f"{statistics.median(values):.3f} ({min(values):.3f})"

        print(
            f"{mode:>8} {column('socket'):>14} {column('answers'):>14} {column('registered'):>14} {column('cpu'):>14} {column('prepared'):>14} "
            f"{column('published'):>14} {sorted({int(r['writes']) for r in runs})!s:>11}"
        )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
