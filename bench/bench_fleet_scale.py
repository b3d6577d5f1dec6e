"""A fleet of simulated nodes on the real control plane: what the driver's slices and classes cost it.

Needs a loopback kit: a K8S_HOME with bin/ (kube-apiserver, kit-etcd, kube-scheduler, kube-controller-manager built
from the Kubernetes source), up.sh, down.sh, kit-env.sh and the kubeconfigs. Use other ports
than a cluster someone else runs (kit-env.sh: ETCD_PORT, APISERVER_PORT, ...), e.g.:

    export K8S_HOME=/tmp/k8s-scale ETCD_PORT=23379 ETCD_PEER_PORT=23380 APISERVER_PORT=17443 \
           SCHEDULER_PORT=17459 CM_PORT=17457
    python bench/bench_fleet_scale.py --up --nodes 100,1000 [--procs 4] [--steady 60] [--pods 100]
    python bench/bench_fleet_scale.py --up --ramp --nodes 1000,1500,2000,2500,3000,3500,4000,4500,5000 --tools

`--up` starts a fresh control plane ($K8S_HOME/up.sh --fresh) for each N and stops it (down.sh
--fresh) at the end; without it the running one is used. With `--ramp` the N are steps of one
fleet grown on one control plane: each step adds nodes and starts their publishers at once and
reports its figures and `free`; the steady state, restart, tools and scheduler run at the last
step. If MemAvailable falls under --min-available GiB (default 4) the publisher processes (and a
tool being measured) are killed, the control plane is stopped (with --up) and the output says how
far the fleet got; a step whose nodes would not fit at the last step's MemAvailable per node is not
started, and the fleet is measured at the size it reached. Without the kit it says so and exits 2.

Per N: N Node objects (allocatable pods only) and, for each, the driver's real SlicePublisher, all
publishers of a process on one shared kubernetes client as the daemon shares one across its
drivers (several per process, --procs processes), node i getting the profile
MIX[i % 5]: dgx-h100 static, dgx-h100 dynamic MIG (208 devices), mi300x, gaudi3-hls, mixed-node
(NVIDIA + AMD). All publishers start at the same instant (a fresh install), then it reports:
- spread of first writes and of "all slices published" over the publishers (stampede or not);
- ResourceSlice objects and their bytes in etcd (etcd's own range API), the API server's RSS;
- requests per node: at start, per minute at steady state, and for a rolling restart of all
  publishers (10 waves), split by verb (apiserver_request_total, resources resourceslices + nodes);
- one extra 208-device dynamic-MIG node: publisher start to all slices published, beside the fleet;
- with --tools (after the publishers are stopped; their slices stay): `dra-driver fleet`, `explain`
  and `template` with --kubeconfig against the fleet, each the whole CLI in a child process: wall time and peak RSS (wait4's ru_maxrss);
- with --pods P: the real kube-scheduler's pods/s and latency (pod created -> nodeName seen on a
  watch) for pods with one ResourceClaimTemplate against a shipped DeviceClass and, interleaved in
  the same run, the same claim against a minimal class (`device.driver == "..."` only).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import multiprocessing as mp
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from dra_driver.backend.interface import Partitioning
    from dra_driver.kube.client import JsonApi

ROOT = Path(__file__).resolve().parent.parent
MIX: tuple[tuple[str, str], ...] = (
    ("dgx-h100", "static"),
    ("dgx-h100", "dynamic"),
    ("mi300x", "static"),
    ("gaudi3-hls", "static"),
    ("mixed-node", "static"),
)
LABEL = "bench.dra-driver.io/fleet-scale"
POOL = 16  # idle connections a publisher process keeps (its publishers' one-shot requests); watches hold their own
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
WATCHED = ("resourceslices", "nodes")
# (scenario, shipped class, minimal class's driver)
SCENARIOS: tuple[tuple[str, str, str], ...] = (
    ("whole GPU", "gpu.nvidia.com", "gpu.nvidia.com"),
    ("MIG profile", "mig-1g.10gb.nvidia.com", "gpu.nvidia.com"),
    ("memory selector", "large-memory.dra-driver.io", "gpu.nvidia.com"),
    ("architecture", "hopper-or-cdna3.dra-driver.io", "gpu.amd.com"),
    ("cross-vendor", "accelerator.dra-driver.io", "gaudi.intel.com"),
)


# ---------------------------------------------------------------------------------------------- the kit


class Kit:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.kubeconfig = str(home / "kubeconfig")
        self.etcd = f"http://127.0.0.1:{os.environ.get('ETCD_PORT', '22379')}"

    def present(self) -> str | None:
        for path in (self.home / "bin" / "kube-apiserver", self.home / "up.sh", self.home / "kubeconfig"):
            if not path.exists():
                return f"{path} is missing"
        return None

    def script(self, name: str, *args: str) -> None:
        subprocess.run([str(self.home / name), *args], check=True, stdout=subprocess.DEVNULL)


def api(kubeconfig: str) -> Any:
    from dra_driver.kube.client import make_json_api

    return make_json_api(kubeconfig=kubeconfig)


_METRIC = re.compile(r'^(\w+)\{([^}]*)\} ([0-9.e+-]+)$')


def metrics(json_api: JsonApi) -> tuple[Counter[tuple[str, str]], float]:
    """(apiserver_request_total by (resource, verb) for WATCHED, the API server's RSS in bytes)."""
    response = json_api.send("GET", "/metrics")
    response.read()
    requests: Counter[tuple[str, str]] = Counter()
    rss = 0.0
    for line in response.data.decode().splitlines():
        if line.startswith("process_resident_memory_bytes "):
            rss = float(line.split()[1])
            continue
        if line.startswith("go_memstats_heap_inuse_bytes "):
            requests[("heap", "inuse")] = int(float(line.split()[1]))  # a gauge, not a count: read it with heap_of
            continue
        match = _METRIC.match(line)
        if match and match.group(1) == "apiserver_watch_cache_consistent_read_total":
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
            if labels.get("resource") in WATCHED:
                # every consistent LIST (no resourceVersion); those the watch cache could not serve in time were read
                # from etcd (the whole prefix)
                requests[(labels["resource"], "LIST consistent")] += int(float(match.group(3)))
                if labels.get("fallback") == "true":
                    requests[(labels["resource"], "LIST from etcd")] += int(float(match.group(3)))
            continue
        if not match or match.group(1) != "apiserver_request_total":
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
        if labels.get("code") == "429":  # throttled (max-inflight or priority and fairness), any resource
            requests[("throttled", "429")] += int(float(match.group(3)))
        if labels.get("resource") in WATCHED:
            requests[(labels["resource"], labels["verb"])] += int(float(match.group(3)))
    return requests, rss


def etcd_slices(etcd: str) -> tuple[int, int]:
    """(ResourceSlice keys, bytes of their stored values) from etcd's JSON gateway."""
    import urllib.request

    prefix = b"/registry/resourceslices/"
    end = prefix[:-1] + bytes([prefix[-1] + 1])
    count, size, key = 0, 0, prefix
    while True:
        body = {"key": base64.b64encode(key).decode(), "range_end": base64.b64encode(end).decode(), "limit": 1000}
        request = urllib.request.Request(f"{etcd}/v3/kv/range", data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            page = json.loads(response.read())
        kvs = page.get("kvs") or []
        for kv in kvs:
            count += 1
            size += len(base64.b64decode(kv.get("value", "")))
        if not page.get("more"):
            return count, size
        key = base64.b64decode(kvs[-1]["key"]) + b"\0"


# ---------------------------------------------------------------------------------------------- inventories


def inventories(mixes: Iterable[int]) -> dict[int, list[Any]]:
    """MIX index -> the inventories its backends discover (one per driver), each opened once and closed."""
    from dra_driver.backend.hardware_profiles import load_profile
    from dra_driver.backend.interface import BackendSettings
    from dra_driver.backend.registry import open_backends

    found: dict[int, list[Any]] = {}
    for index in sorted(set(mixes)):
        profile, partitioning = MIX[index]
        opened = open_backends(BackendSettings(node_name="bench", partitioning=partitioning), load_profile(profile))  # type: ignore[arg-type]
        try:
            found[index] = [backend.discover() for backend in opened.backends]
        finally:
            opened.close()
    return found


def shared_client(kubeconfig: str, pool: int = POOL) -> Any:
    """One JsonApi (one urllib3 pool) for every publisher of a process, as the daemon shares one across its drivers.

    A client per publisher cost ~0.55 MiB each: ~830 MiB per process at 1,500 publishers before a slice was
    written. The pool keeps `pool` idle connections; requests
    beyond it (1,500 publishers starting at once, each watch holding its connection) open more and close them
    when done, which urllib3 would report once per connection at WARNING: that line is silenced here."""
    import logging

    from dra_driver.kube.client import JsonApi, load_configuration

    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    configuration = load_configuration(kubeconfig=kubeconfig)
    configuration.connection_pool_maxsize = pool
    return JsonApi(configuration)


def make_publisher(api_client: Any, node: str, inventory: Any, partitioning: str) -> Any:
    from dra_driver.node.publisher import PublisherOptions, SlicePublisher

    options = PublisherOptions(partitioning=cast("Partitioning", partitioning))
    return SlicePublisher(api_client, node, inventory.driver, lambda _mode: inventory, options)


class Timed:
    """A publisher and when its first create and its first completed sync happened (time.time())."""

    def __init__(self, publisher: Any) -> None:
        self.publisher = publisher
        self.first_create: float | None = None
        self.synced: float | None = None
        count, create = publisher._count_sync, publisher._create

        def counted() -> None:
            if self.synced is None:
                self.synced = time.time()
            count()

        def created(spec: Any) -> Any:
            if self.first_create is None:
                self.first_create = time.time()
            return create(spec)

        publisher._count_sync, publisher._create = counted, created


def worker(kubeconfig: str, conn: Any) -> None:
    """One process of publishers, all on one shared client: add nodes, start the new ones at the instant the
    parent names, restart all in waves, stop."""
    threading.stack_size(512 * 1024)
    sys.path.insert(0, str(ROOT))
    api_client = shared_client(kubeconfig)
    found: dict[int, list[Any]] = {}
    made: list[tuple[str, Any, str]] = []
    timed: list[Timed] = []
    started = 0  # timed[:started] are running
    while True:
        command, arg = conn.recv()
        if command == "add":
            found.update(inventories(index for _, index in arg if index not in found))
            new = [(node, inventory, MIX[index][1]) for node, index in arg for inventory in found[index]]
            made.extend(new)
            timed.extend(Timed(make_publisher(api_client, *item)) for item in new)
            conn.send(("ready", len(new)))
        elif command == "start":
            time.sleep(max(0.0, arg - time.time()))
            batch = timed[started:]
            for item in batch:
                item.publisher.start()
            started = len(timed)
            wait_all(batch)
            conn.send(("synced", [(item.first_create, item.synced) for item in batch]))
        elif command == "restart":
            waves = 10
            size = max(1, -(-len(timed) // waves))
            for begin in range(0, len(timed), size):
                wave = list(range(begin, min(begin + size, len(timed))))
                for i in wave:
                    timed[i].publisher.stop()
                    timed[i] = Timed(make_publisher(api_client, *made[i]))
                    timed[i].publisher.start()
                wait_all([timed[i] for i in wave])
            conn.send(("restarted", sum(sum(item.publisher.writes.values()) for item in timed)))
        elif command == "stop":
            for item in timed:
                item.publisher.stop(timeout=0.5)
            conn.send(("stopped", None))
            return


def wait_all(timed: list[Timed], limit: float = 1800.0) -> None:
    deadline = time.time() + limit
    while any(item.synced is None for item in timed) and time.time() < deadline:
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------------- one fleet


def create_nodes(json_api: Any, names: list[str]) -> None:
    def one(name: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {LABEL: "true", "kubernetes.io/hostname": name}},
            "status": {"allocatable": {"pods": "110", "cpu": "64", "memory": "512Gi"}, "capacity": {"pods": "110", "cpu": "64", "memory": "512Gi"}},
        }
        json_api.request("POST", "/api/v1/nodes", body=body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, names))


def spread(values: list[float]) -> str:
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return f"first {ordered[0]:.2f} s, p50 {pick(0.5):.2f} s, p90 {pick(0.9):.2f} s, last {ordered[-1]:.2f} s"


def heap_of(sample: Counter[tuple[str, str]]) -> str:
    """The API server's Go heap in use (live objects and their spans): RSS less the collector's slack."""
    return f"{sample[('heap', 'inuse')] / 2**20:,.0f} MiB"


def per_node(delta: Counter[tuple[str, str]], nodes: int, minutes: float = 1.0) -> str:
    parts = [f"{verb} {resource} {count / nodes / minutes:.3g}" for (resource, verb), count in sorted(delta.items()) if count and resource != "heap"]
    return ", ".join(parts) or "none"


def probe_mig(api_client: Any, json_api: Any, repeat: int = 3) -> list[float]:
    """Start to all slices published for one 208-device dynamic-MIG node beside the fleet (ms)."""
    inventory = inventories([1])[1][0]
    times = []
    for i in range(repeat):
        name = f"probe-mig-{i}"
        create_nodes(json_api, [name])
        started = time.perf_counter()
        publisher = make_publisher(api_client, name, inventory, "dynamic")
        publisher.sync_once()
        times.append((time.perf_counter() - started) * 1000)
        json_api.request("DELETE", f"/api/v1/nodes/{name}")
    return times


# ---------------------------------------------------------------------------------------------- memory


def rss_of(pid: int) -> int:
    """VmRSS of a process in bytes (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def available() -> int:
    """MemAvailable of the machine in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


class Aborted(Exception):
    """The machine's available memory fell under the floor: the fleet's processes were killed."""


class MemoryGuard:
    """Polls MemAvailable every second; under `floor` it kills the processes it was given (the publishers'
    worker processes, a tool being measured) so the shared machine keeps its memory, and remembers why."""

    def __init__(self, floor: int) -> None:
        self.floor = floor
        self.reason = ""
        self.lowest = available()
        self._pids: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def watch(self, pid: int) -> None:
        self._pids.add(pid)

    def forget(self, pid: int) -> None:
        self._pids.discard(pid)

    def check(self) -> None:
        if self.reason:
            raise Aborted(self.reason)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            free = available()
            self.lowest = min(self.lowest, free)
            if free < self.floor and not self.reason:
                self.reason = f"MemAvailable {free / 2**30:.1f} GiB < {self.floor / 2**30:.1f} GiB at {time.strftime('%H:%M:%S')}"
                print(f"  ABORT: {self.reason}: killing {len(self._pids)} bench processes", flush=True)
                for pid in list(self._pids):
                    try:
                        os.kill(pid, 9)
                    except OSError:
                        pass

    def stop(self) -> None:
        self._stop.set()


def control_plane_rss(kit: Kit) -> str:
    parts = []
    for name in ("etcd", "apiserver", "scheduler", "controller-manager"):
        try:
            pid = int((kit.home / "run" / f"{name}.pid").read_text())
        except (OSError, ValueError):
            continue
        parts.append(f"{name} {rss_of(pid) / 2**20:,.0f}")
    return "RSS MiB: " + ", ".join(parts)


def print_free(kit: Kit, workers: list[Any]) -> None:
    """`free -m`, the control plane's and the publisher processes' RSS: what a step costs the machine."""
    free = subprocess.run(["free", "-m"], capture_output=True, text=True).stdout.rstrip()
    print("  " + free.replace("\n", "\n  "))
    worker_rss = sum(rss_of(process.pid) for process in workers)
    print(f"  {control_plane_rss(kit)}; publisher processes {worker_rss / 2**20:,.0f} ({len(workers)})")


# ---------------------------------------------------------------------------------------------- one fleet, in steps


def ask(pipes: list[Any], guard: MemoryGuard, message: tuple[str, Any] | list[tuple[str, Any]]) -> list[Any]:
    """Send each worker its message (one for all, or one each) and collect the answers; Aborted if the guard fired."""
    messages = message if isinstance(message, list) else [message] * len(pipes)
    try:
        for pipe, item in zip(pipes, messages):
            pipe.send(item)
        return [pipe.recv()[1] for pipe in pipes]
    except (EOFError, BrokenPipeError, ConnectionResetError) as exc:
        guard.check()
        raise RuntimeError(f"a publisher process died: {exc!r}") from exc


def run_fleet(kit: Kit, steps: list[int], procs: int, steady: float, pods: int, rounds: int, with_tools: bool, floor: float) -> None:
    """Grow one fleet through `steps` (N after each), measuring each step; the whole set of measurements at the last."""
    json_api = api(kit.kubeconfig)
    apply_classes(json_api)  # as deploy/ installs them: explain and template need the classes their claims name
    guard = MemoryGuard(int(floor * 2**30))
    ctx = mp.get_context("spawn")
    pipes, children = [], []
    for _ in range(procs):
        parent, child = ctx.Pipe()
        process = ctx.Process(target=worker, args=(kit.kubeconfig, child), daemon=True)
        process.start()
        assert process.pid is not None  # started
        guard.watch(process.pid)
        pipes.append(parent)
        children.append(process)
    nodes, per_node_cost = 0, 0.0
    try:
        for target in steps:
            needed = per_node_cost * (target - nodes)
            if nodes and available() - needed < guard.floor:
                print(f"N={target} not started: at {per_node_cost / 2**20:.1f} MiB of MemAvailable per node (the last step's), "
                      f"{target - nodes} more nodes need ~{needed / 2**30:.1f} GiB and would leave {(available() - needed) / 2**30:.1f} GiB "
                      f"(< {guard.floor / 2**30:.1f}); the fleet stays at N={nodes}")
                break
            free_before = available()
            step_nodes(kit, json_api, guard, pipes, children, nodes, target)
            per_node_cost = max(0.0, (free_before - available()) / (target - nodes))
            nodes = target
        whole_fleet(kit, json_api, guard, pipes, nodes, steady)
        ask(pipes, guard, ("stop", None))
        for process in children:
            process.join(10)
            guard.forget(process.pid or 0)
        print(f"  publishers stopped (their slices stay); {control_plane_rss(kit)}; MemAvailable {available() / 2**30:.1f} GiB")
        if with_tools:
            tools(kit.kubeconfig, nodes, guard)
        if pods:
            schedule(json_api, pods, rounds)
    except Aborted as exc:
        print(f"N={nodes}: stopped by the memory guard ({exc}); the last step measured in full is N={nodes}; {control_plane_rss(kit)}")
        kit.script("down.sh")  # the control plane holds the memory: off, whether or not this run started it
        print("  control plane stopped (down.sh)")
    finally:
        guard.stop()
        for process in children:
            if process.is_alive():
                process.kill()
            process.join(5)
        print(f"  lowest MemAvailable during the run: {guard.lowest / 2**30:.1f} GiB")


def step_nodes(kit: Kit, json_api: Any, guard: MemoryGuard, pipes: list[Any], children: list[Any], first: int, target: int) -> None:
    """Nodes first..target-1: Node objects, their publishers (built, then all started at one instant), the step's figures."""
    names = [f"fs-{i:05d}" for i in range(first, target)]
    started = time.perf_counter()
    create_nodes(json_api, names)
    print(f"N={target}: {len(names)} more Node objects created in {time.perf_counter() - started:.1f} s; load average {os.getloadavg()[0]:.1f}")
    guard.check()
    shares = [[(name, (first + i) % len(MIX)) for i, name in enumerate(names) if i % len(pipes) == p] for p in range(len(pipes))]
    built = time.perf_counter()
    publishers = sum(ask(pipes, guard, [("add", share) for share in shares]))
    print(f"  {publishers} publishers built in {time.perf_counter() - built:.1f} s")
    before, rss0 = metrics(json_api)
    start_at = time.time() + 2.0
    results = [r for answer in ask(pipes, guard, ("start", start_at)) for r in answer]
    after_start, rss = metrics(json_api)
    creates = [c - start_at for c, _ in results if c is not None]
    synced = [s - start_at for _, s in results if s is not None]
    print(f"  {publishers} publishers ({len(pipes)} processes) started at once; load average {os.getloadavg()[0]:.1f}")
    if creates:
        print(f"  first create after start: {spread(creates)}")
    print(f"  all slices published:     {spread(synced)} ({len(synced)}/{publishers} synced)")
    delta = after_start - before
    print(f"  requests per new node at start: {per_node(delta, len(names))}; 429s (any resource): {delta[('throttled', '429')]}")
    count, size = etcd_slices(kit.etcd)
    print(
        f"  etcd: {count} ResourceSlices, {size / 2**20:.1f} MiB stored "
        f"({size / max(count, 1) / 1024:.1f} KiB each, {size / target / 1024:.1f} KiB per node)"
    )
    print(
        f"  API server RSS: {rss / 2**20:,.0f} MiB, heap in use {heap_of(after_start)} "
        f"(before this step's publishers {rss0 / 2**20:,.0f} MiB, {heap_of(before)})"
    )
    print_free(kit, children)
    guard.check()


def whole_fleet(kit: Kit, json_api: Any, guard: MemoryGuard, pipes: list[Any], nodes: int, steady: float) -> None:
    """Steady state, a rolling restart of every publisher, one more dynamic-MIG node: at the fleet's final size."""
    after_start, _ = metrics(json_api)
    time.sleep(steady)
    guard.check()
    steady_end, rss = metrics(json_api)
    print(f"N={nodes}, whole fleet: API server RSS {rss / 2**20:,.0f} MiB, heap in use {heap_of(steady_end)} after {steady:.0f} s of steady state")
    print(f"  requests per node per minute, steady ({steady:.0f} s): {per_node(steady_end - after_start, nodes, steady / 60)}")
    t0 = time.perf_counter()
    writes = sum(ask(pipes, guard, ("restart", None)))
    restarted, _ = metrics(json_api)
    print(f"  rolling restart of all publishers (10 waves per process): {time.perf_counter() - t0:.1f} s, {writes} writes; "
          f"requests per node: {per_node(restarted - steady_end, nodes)}")
    probe = probe_mig(shared_client(kit.kubeconfig), json_api)
    print(
        f"  208-device dynamic-MIG node beside the fleet: start to all slices published {statistics.median(probe):.0f} ms "
        f"(median of {len(probe)}: {', '.join(f'{t:.0f}' for t in probe)})"
    )
    print_free(kit, [])


# ---------------------------------------------------------------------------------------------- the tools

CLAIM = """apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: one-h100, namespace: default}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.nvidia.com, count: 2}
"""


def tools(kubeconfig: str, nodes: int, guard: MemoryGuard) -> None:
    import tempfile

    claim = Path(tempfile.mkdtemp(prefix="bench-fleet-scale-")) / "claim.yaml"
    claim.write_text(CLAIM)
    cli = [sys.executable, "-m", "dra_driver.cli.main"]
    runs = {
        "fleet": [*cli, "fleet", "--kubeconfig", kubeconfig],
        "explain": [*cli, "explain", "--kubeconfig", kubeconfig, str(claim)],
        "template": [*cli, "template", "--count", "2", "--model", "H100", "--kubeconfig", kubeconfig],
    }
    for name, command in runs.items():
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        guard.watch(process.pid)
        _, status, usage = os.wait4(process.pid, 0)
        guard.forget(process.pid)
        guard.check()
        wall = time.perf_counter() - started
        err = process.stderr.read().decode() if process.stderr else ""
        progress = sum(1 for line in err.splitlines() if line.startswith(("reading ", "read ")))
        print(
            f"  {name} --kubeconfig at N={nodes}: {wall:.2f} s wall, {usage.ru_utime + usage.ru_stime:.2f} s CPU, "
            f"peak RSS {usage.ru_maxrss / 1024:.0f} MiB, "
            f"exit {os.waitstatus_to_exitcode(status)}, {progress} progress lines on stderr"
        )
        if os.waitstatus_to_exitcode(status):  # say why: a verdict (nothing fits) or an error
            print("    " + "\n    ".join(err.splitlines()[-3:]))


# ---------------------------------------------------------------------------------------------- the scheduler


def apply_classes(json_api: Any) -> None:
    import yaml

    from kubernetes.client.rest import ApiException

    docs = [yaml.safe_load(path.read_text()) for path in sorted((ROOT / "deviceclasses").glob("*.yaml")) if path.name != "kustomization.yaml"]
    for driver in {minimal for _, _, minimal in SCENARIOS}:
        docs.append({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": minimal_class(driver)},
                     "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}})
    for doc in docs:
        try:
            json_api.request("POST", "/apis/resource.k8s.io/v1/deviceclasses", body=doc)
        except ApiException as exc:
            if exc.status != 409:
                raise


def minimal_class(driver: str) -> str:
    return f"minimal.{driver}"


class PodWatch:
    """nodeName first seen on a watch of the namespace's pods, by pod name (time.perf_counter())."""

    def __init__(self, json_api: Any, namespace: str) -> None:
        self.bound: dict[str, float] = {}
        self._stream = json_api.watch(f"/api/v1/namespaces/{namespace}/pods", {"timeoutSeconds": "3600"})
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self._stream:
                pod = event.get("object") or {}
                name = (pod.get("metadata") or {}).get("name")
                if isinstance(name, str) and (pod.get("spec") or {}).get("nodeName") and name not in self.bound:
                    self.bound[name] = time.perf_counter()
        except Exception:  # stopped
            return

    def stop(self) -> None:
        self._stream.stop()


def schedule(json_api: Any, pods: int, rounds: int) -> None:
    namespace = "fleet-scale"
    json_api.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_for_serviceaccount(json_api, namespace)
    watch = PodWatch(json_api, namespace)
    results: dict[tuple[str, str], list[tuple[float, list[float]]]] = {}
    for r in range(rounds):
        for scenario, shipped, driver in SCENARIOS:
            for variant, device_class in (("shipped", shipped), ("minimal", minimal_class(driver))):
                tag = f"{r}-{SCENARIOS.index((scenario, shipped, driver))}-{variant}"
                rate, latencies = batch(json_api, watch, namespace, tag, device_class, pods)
                results.setdefault((scenario, variant), []).append((rate, latencies))
                print(f"    batch {tag} {device_class}: {rate:.1f} pods/s, p50 {statistics.median(latencies):.0f} ms", flush=True)
    watch.stop()
    print(f"  scheduler: {pods} pods per batch, one claim template each (1 device), {rounds} rounds, shipped and minimal interleaved")
    print(
        f"  {'scenario':16} {'shipped class':32} {'pods/s':>7} {'p50 ms':>7} {'p99 ms':>7} | "
        f"{'minimal pods/s':>14} {'p50 ms':>7} {'p99 ms':>7} | ratio p50"
    )
    for scenario, shipped, _ in SCENARIOS:
        row = []
        for variant in ("shipped", "minimal"):
            runs = results[(scenario, variant)]
            rate = statistics.median(rate for rate, _ in runs)
            latencies = sorted(x for _, lat in runs for x in lat)
            row.append((rate, latencies[len(latencies) // 2], latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]))
        (a, b, c), (d, e, f) = row
        print(f"  {scenario:16} {shipped:32} {a:7.1f} {b:7.0f} {c:7.0f} | {d:14.1f} {e:7.0f} {f:7.0f} | x{b / e:.2f}")


def wait_for_serviceaccount(json_api: Any, namespace: str) -> None:
    from kubernetes.client.rest import ApiException

    for _ in range(300):
        try:
            json_api.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
            return
        except ApiException:
            time.sleep(0.1)


def batch(json_api: Any, watch: PodWatch, namespace: str, tag: str, device_class: str, pods: int) -> tuple[float, list[float]]:
    """Create a claim template and `pods` pods using it; wait until all are bound: (pods/s, latencies ms)."""
    template = f"t-{tag}"
    json_api.request("POST", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates", body={
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": template},
        "spec": {"spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": device_class}}]}}},
    })
    created: dict[str, float] = {}

    def one(i: int) -> None:
        name = f"p-{tag}-{i}"
        created[name] = time.perf_counter()
        json_api.request("POST", f"/api/v1/namespaces/{namespace}/pods", body={
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"claims": [{"name": "dev"}]}}],
                     "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": template}],
                     "nodeSelector": {LABEL: "true"}},
        })

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(pods)))
    deadline = time.perf_counter() + 600
    while not all(name in watch.bound for name in created) and time.perf_counter() < deadline:
        time.sleep(0.05)
    done = [name for name in created if name in watch.bound]
    if len(done) < len(created):
        print(f"  WARNING: {len(created) - len(done)} of {len(created)} pods of {device_class} not scheduled in 600 s")
    first = min(created.values())
    last = max(watch.bound[name] for name in done) if done else first
    latencies = [(watch.bound[name] - created[name]) * 1000 for name in done]
    return len(done) / max(last - first, 1e-9), latencies or [float("nan")]


# ---------------------------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k8s-home", default=os.environ.get("K8S_HOME", "/tmp/k8s"), help="the installed kit (default $K8S_HOME)")
    parser.add_argument("--up", action="store_true", help="start a fresh control plane for each N and stop it at the end")
    parser.add_argument("--nodes", default="100", help="comma-separated N (default 100)")
    parser.add_argument("--procs", type=int, default=4, help="publisher processes")
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of steady state measured")
    parser.add_argument("--pods", type=int, default=0, help="pods per scheduler batch (0: no scheduler phase)")
    parser.add_argument("--tools", action="store_true", help="time fleet/explain/template --kubeconfig against the fleet")
    parser.add_argument("--rounds", type=int, default=2, help="scheduler rounds (shipped and minimal interleaved)")
    parser.add_argument(
        "--ramp", action="store_true", help="the N of --nodes are steps of one fleet grown on one control plane (e.g. 1000,2500,5000)"
    )
    parser.add_argument(
        "--min-available", type=float, default=4.0, help="GiB: kill the publishers and stop if MemAvailable falls under it (default 4)"
    )
    args = parser.parse_args()
    kit = Kit(Path(args.k8s_home))
    missing = kit.present()
    if missing:
        print(f"bench_fleet_scale: no kit at {kit.home} ({missing}); lay out a loopback kit there and set K8S_HOME", file=sys.stderr)
        return 2
    sizes = [int(n) for n in args.nodes.split(",")]
    if sizes != sorted(set(sizes)):
        print("bench_fleet_scale: --nodes must be increasing (e.g. 1000,2500,5000)", file=sys.stderr)
        return 2
    if len(sizes) > 1 and not (args.up or args.ramp):
        print("bench_fleet_scale: several N need --up (a fresh control plane for each) or --ramp (one fleet grown in steps)", file=sys.stderr)
        return 2
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    print(f"kit {kit.home}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start, MemAvailable {available() / 2**30:.1f} GiB")
    fleets = [sizes] if args.ramp else [[n] for n in sizes]
    try:
        for steps in fleets:
            if args.up:
                kit.script("up.sh", "--fresh")
            run_fleet(kit, steps, args.procs, args.steady, args.pods, args.rounds, args.tools, args.min_available)
    finally:
        if args.up:
            kit.script("down.sh", "--fresh")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
