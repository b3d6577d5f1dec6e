"""API requests one node's daemon makes, by verb and resource, phase by phase, counted by the simulated API server.

Starts the real `dra-driver run --profile P` (one node) against the in-process API server and counts every
request it receives (`SimApiServer.requests`, by verb and resource: list, watch, get, create, update, delete),
in these phases:
  - start: process start until the pool is published, plus a settling second;
  - idle: --idle seconds with nothing happening (a healthy watch needs nothing; its renewal after a jittered
    5-10 minutes is the only request a long idle period adds: about 0.13 a minute);
  - prepare: --claims claims prepared and unprepared through the kubelet's gRPC API (one claim GET each);
  - kubelet wipe: the node's slices deleted by someone else, as a starting kubelet does, until republished;
  - restart: the daemon stopped (SIGTERM) and started again, until republished.
It also prints the User-Agents the requests carried.

usage: python bench/bench_api_requests.py [--profile P] [--idle S] [--claims N]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from dra_driver.simulation import api_server as sim_apiserver
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import ClaimRef
from node_layout import SIMULATED, node_dirs

DRIVER = "gpu.nvidia.com"
NODE = "bench-node"


def wait(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.01)


def published(server: sim_apiserver.SimApiServer) -> bool:
    slices = server.objects("ResourceSlice", spec__nodeName=NODE, spec__driver=DRIVER)
    return bool(slices) and len(slices) == slices[0]["spec"]["pool"]["resourceSliceCount"]


def start(server: sim_apiserver.SimApiServer, work: Path, profile: str) -> subprocess.Popen[bytes]:
    node_dirs(work / "k", work / "c")
    command = [
        sys.executable, "-m", "dra_driver.cli.main", "run", "--profile", profile, *SIMULATED, "--vendors", "nvidia", "--node-name", NODE,
        "--api-server", server.url, "--kubelet-dir", str(work / "k"), "--cdi-dir", str(work / "c"), "--state-dir", str(work / "s"),
    ]  # fmt: skip
    watches = server.requests[("watch", "resourceslices")]
    daemon = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait(lambda: published(server) and server.requests[("watch", "resourceslices")] > watches, "the pool and a new slice watch")
    time.sleep(1.0)  # settle: anything the start-up still sends
    return daemon


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="dgx-h100")
    parser.add_argument("--idle", type=float, default=60.0, help="idle seconds counted (default 60)")
    parser.add_argument("--claims", type=int, default=20)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dra-apireq-", dir="/tmp"))
    server = sim_apiserver.SimApiServer().start()
    server.add_node(NODE)
    claims = []
    for number in range(args.claims):
        body = allocated_claim_object(f"c{number}", "default", DRIVER, NODE, {"gpu": [f"gpu-{number % 8}"]}, device_class=DRIVER)
        body["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
        stored = server.store.put(body)
        claims.append(ClaimRef("default", f"c{number}", stored["metadata"]["uid"]))
    phases: list[tuple[str, Counter[tuple[str, str]]]] = []

    def phase(name: str, action: Callable[[], object]) -> object:
        before = Counter(server.requests)
        result = action()
        phases.append((name, Counter(server.requests) - before))
        return result

    daemon: subprocess.Popen[bytes] | None = None
    try:
        daemon = phase("start", lambda: start(server, work, args.profile))  # type: ignore[assignment]
        phase(f"idle {args.idle:.0f} s", lambda: time.sleep(args.idle))

        def prepare_all() -> None:
            conn = register(PluginPaths(work / "k", DRIVER).registration_socket)
            for claim in claims:
                if conn.prepare([claim]).claims[claim.uid].error or conn.unprepare([claim]).claims[claim.uid].error:
                    raise SystemExit(f"claim {claim.name} failed")
            conn.close()
            time.sleep(1.0)

        phase(f"prepare+unprepare {args.claims}", prepare_all)

        def wipe() -> None:
            server.delete_collection_as_other("ResourceSlice", spec__nodeName=NODE)
            wait(lambda: published(server), "republished after the wipe")
            time.sleep(1.0)

        phase("kubelet wipe", wipe)

        def restart() -> subprocess.Popen[bytes]:
            assert daemon is not None
            daemon.terminate()
            daemon.wait(30)
            return start(server, work, args.profile)

        daemon = phase("restart", restart)  # type: ignore[assignment]
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(30)
        agents = Counter(record.headers.get("User-Agent") for record in server.request_log)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"requests per phase, one node ({args.profile}, driver {DRIVER}), by verb and resource")
    for name, counts in phases:
        listed = ", ".join(f"{verb} {resource} {count}" for (verb, resource), count in sorted(counts.items())) or "none"
        print(f"{name:>24}: {sum(counts.values()):>3}  ({listed})")
    print(f"User-Agent: {dict(agents)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
