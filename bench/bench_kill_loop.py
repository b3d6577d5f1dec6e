"""Randomized kill -9 loop: the daemon is killed again and again, and nothing it prepared is ever lost or doubled.

The daemon is the real `dra-driver run --profile dgx-h100 --vendors nvidia` (8 whole GPUs over the fake
NVML) against the in-process simulated API server, in rolling-update mode (`--pod-uid`) as deployed; this
script plays the kubelet. Every round:

1. starts the daemon; in about one round of four it is first killed during start-up (a random moment
   before it would serve) and started again;
2. measures restart-to-serving (process start until the registration socket answers GetInfo);
3. checks the node: every claim whose last answer was a successful prepare has its CDI spec on disk,
   defining every CDI ID answered, and its claim file recording every device answered; no spec of a claim that is not
   prepared (or whose call was cut off by a kill); no device in two claims' specs; no device in two claims
   answered as prepared;
4. sends a burst of concurrent prepares (new claims on random GPUs, so they collide, and retries of
   claims whose call was cut off) and unprepares, and kill -9s the daemon at a random moment in it
   (one round in ten lets the burst finish and kills it idle). Every success answer is checked at once
   against the spec on disk.

At the end everything is unprepared; no spec, record or lock may be left.

usage: python bench/bench_kill_loop.py [--rounds N] [--max-minutes M] [--seed S] [--concurrency C] [--single-instance]

With --max-minutes no new round starts after M minutes (a shared machine may not fit 1,000 rounds); the
final unprepare-everything check still runs and the summary says how many rounds were done.

Exits non-zero on the first violated invariant, naming it.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from dra_driver.node import cdi
from dra_driver.simulation import api_server as sim_apiserver
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.kubelet_client import PluginConnection, register
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import ClaimRef
from node_layout import SIMULATED, node_dirs

DRIVER = "gpu.nvidia.com"
NODE = "kill-node"
POD_UID = "7a0c9d1e-kill-loop"
GPUS = [f"gpu-{i}" for i in range(8)]
CALL_TIMEOUT_S = 30.0


class Violation(AssertionError):
    """An invariant the driver must keep whatever the kills."""


@dataclass
class Claim:
    ref: ClaimRef
    devices: list[str]
    status: str = "free"  # free | prepared (last answer: prepare ok) | maybe (last call cut off by a kill)
    answered: list[tuple[str, list[str]]] = field(default_factory=list)  # (device, CDI IDs) of the last success


@dataclass
class Stats:
    serving_s: list[float] = field(default_factory=list)
    startup_kills: int = 0
    prepared: int = 0
    refused: int = 0
    unprepared: int = 0
    cut_off: int = 0
    burst_s: list[float] = field(default_factory=list)  # bursts that ran to the end: where to aim the kills


class Node:
    """The daemon process and the paths it uses."""

    def __init__(self, server: sim_apiserver.SimApiServer, work: Path, run_dir: Path, single_instance: bool) -> None:
        self.server = server
        self.pod_uid = None if single_instance else POD_UID
        self.cdi_dir = run_dir / "cdi"
        self.state_dir = run_dir / "state"
        self.paths = PluginPaths(work / "kubelet", DRIVER, self.pod_uid, self.state_dir)
        self.log = open(work / "daemon.log", "ab")  # noqa: SIM115 - kept for the whole run
        node_dirs(work / "kubelet", self.cdi_dir)
        self.command = [
            sys.executable, "-m", "dra_driver.cli.main", "run", "--profile", "dgx-h100", *SIMULATED, "--vendors", "nvidia",
            "--node-name", NODE, "--api-server", server.url, "--kubelet-dir", str(work / "kubelet"),
            "--cdi-dir", str(self.cdi_dir), "--state-dir", str(self.state_dir), "--no-claim-cache",
        ]  # fmt: skip
        if self.pod_uid:
            self.command += ["--pod-uid", self.pod_uid]
        self.proc: subprocess.Popen[bytes] | None = None

    def spawn(self) -> float:
        self.proc = subprocess.Popen(self.command, stdout=self.log, stderr=self.log)
        return time.perf_counter()

    def wait_serving(self, started: float) -> tuple[PluginConnection, float]:
        deadline = started + 60
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise Violation(f"daemon exited with {self.proc.returncode} during start-up (see daemon.log)")
            try:
                conn = register(self.paths.registration_socket, timeout=0.5)
                return conn, time.perf_counter() - started
            except Exception:
                if time.perf_counter() > deadline:
                    raise Violation("daemon did not serve within 60 s") from None
                time.sleep(0.01)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


# --- invariants ---------------------------------------------------------------------------


def spec_of(node: Node, uid: str) -> tuple[set[str], set[str]] | None:
    """(CDI device names, devices its claim file records) of a claim's spec on disk, or None without one."""
    try:
        spec = cdi.parse_spec(Path(cdi.spec_path(node.cdi_dir, DRIVER, uid)).read_bytes())
    except FileNotFoundError:
        return None
    try:
        record = cdi.read_claim_file(Path(cdi.claim_file_path(node.cdi_dir, DRIVER, uid)))["record"]
    except FileNotFoundError:
        raise Violation(f"claim {uid}: a CDI spec without its claim file") from None
    return cdi.device_names(spec), {d["device"] for d in record["devices"]}


def check_answer(node: Node, claim: Claim) -> None:
    """A success answer: every CDI ID it gave resolves to the claim's spec, which records its devices."""
    found = spec_of(node, claim.ref.uid)
    if found is None:
        raise Violation(f"claim {claim.ref.name} answered prepared but its CDI spec does not exist")
    names, recorded = found
    for device, ids in claim.answered:
        missing = {i.partition("=")[2] for i in ids} - names
        if missing or device not in recorded:
            raise Violation(f"claim {claim.ref.name}: spec lacks CDI devices {sorted(missing)} or device {device}")


def check_node(node: Node, claims: dict[str, Claim]) -> None:
    holders: dict[str, str] = {}
    for uid in cdi.our_spec_files(node.cdi_dir, DRIVER):
        claim = claims.get(uid)
        if claim is None or claim.status == "free":
            raise Violation(f"CDI spec of claim {claim.ref.name if claim else uid} that is not prepared")
        found = spec_of(node, uid)
        for device in found[1] if found else ():
            if device in holders:
                raise Violation(f"device {device} is in the specs of two claims: {holders[device]} and {claim.ref.name}")
            holders[device] = claim.ref.name
    live: dict[str, str] = {}
    for claim in claims.values():
        if claim.status != "prepared":
            continue
        check_answer(node, claim)
        for device in claim.devices:
            if device in live:
                raise Violation(f"device {device} answered prepared for two claims: {live[device]} and {claim.ref.name}")
            live[device] = claim.ref.name


# --- one burst ---------------------------------------------------------------------------------


def prepare(node: Node, conn: PluginConnection, claim: Claim, stats: Stats, lock: threading.Lock) -> None:
    try:
        answer = conn.prepare([claim.ref], CALL_TIMEOUT_S).claims[claim.ref.uid]
    except Exception:
        with lock:
            claim.status, stats.cut_off = "maybe", stats.cut_off + 1
        return
    with lock:
        if answer.error:
            stats.refused += 1
            if claim.status != "prepared":
                claim.status = "free"
            return
        claim.answered = [(d.device_name, list(d.cdi_device_ids)) for d in answer.devices]
        claim.status, stats.prepared = "prepared", stats.prepared + 1
    check_answer(node, claim)  # the daemon may be killed any moment: the spec must already be there


def unprepare(conn: PluginConnection, claim: Claim, stats: Stats, lock: threading.Lock) -> None:
    try:
        error = conn.unprepare([claim.ref], CALL_TIMEOUT_S).claims[claim.ref.uid].error
    except Exception:
        with lock:
            claim.status, stats.cut_off = "maybe", stats.cut_off + 1
        return
    if error:
        raise Violation(f"unprepare of {claim.ref.name} failed: {error}")
    with lock:
        claim.status, claim.answered, stats.unprepared = "free", [], stats.unprepared + 1


def burst(node: Node, conn: PluginConnection, claims: dict[str, Claim], rng: random.Random, concurrency: int, stats: Stats) -> None:
    busy = [c for c in claims.values() if c.status != "free"]
    ops: list[tuple[str, Claim]] = []
    for claim in rng.sample(busy, min(len(busy), concurrency // 2 + 1)):
        ops.append(("unprepare" if claim.status == "prepared" or rng.random() < 0.5 else "prepare", claim))
    while len(ops) < concurrency:
        ref = new_claim(node.server, len(claims), rng)
        claims[ref.ref.uid] = ref
        ops.append(("prepare", ref))
    lock = threading.Lock()
    typical = statistics.median(stats.burst_s[-20:]) if stats.burst_s else 0.05
    # The first burst runs to the end to learn how long a burst takes; then kills land inside bursts.
    kill_at = None if not stats.burst_s or rng.random() < 0.1 else rng.uniform(0.0, typical * 1.2)
    killer = threading.Timer(kill_at, node.kill) if kill_at is not None else None
    errors: list[BaseException] = []
    with ThreadPoolExecutor(concurrency) as pool:
        started = time.perf_counter()
        if killer is not None:
            killer.start()
        futures = [
            pool.submit(prepare, node, conn, claim, stats, lock) if op == "prepare" else pool.submit(unprepare, conn, claim, stats, lock)
            for op, claim in ops
        ]
        for future in futures:
            try:
                future.result()
            except BaseException as exc:  # noqa: BLE001 - reported after the burst
                errors.append(exc)
        if killer is None:
            stats.burst_s.append(time.perf_counter() - started)
    if killer is not None:
        killer.join()
    node.kill()  # an idle kill when the burst finished first
    conn.close()
    if errors:
        raise errors[0]


def new_claim(server: sim_apiserver.SimApiServer, index: int, rng: random.Random) -> Claim:
    devices = rng.sample(GPUS, rng.choice((1, 1, 2)))
    body = allocated_claim_object(f"c{index}", "kill", DRIVER, NODE, {"gpu": devices}, device_class=DRIVER)
    stored = server.store.put(body)
    return Claim(ClaimRef("kill", stored["metadata"]["name"], stored["metadata"]["uid"]), devices)


# --- the loop ---------------------------------------------------------------------------------


def restart(node: Node, rng: random.Random, stats: Stats) -> PluginConnection:
    typical = statistics.median(stats.serving_s) if stats.serving_s else 1.0
    if rng.random() < 0.25:  # killed during start-up, at a random moment before it would serve
        node.spawn()
        time.sleep(rng.uniform(0.0, typical))
        node.kill()
        stats.startup_kills += 1
    started = node.spawn()
    conn, serving = node.wait_serving(started)
    stats.serving_s.append(serving)
    return conn


def finish(node: Node, claims: dict[str, Claim], stats: Stats) -> None:
    conn, serving = node.wait_serving(node.spawn())
    stats.serving_s.append(serving)
    check_node(node, claims)
    lock = threading.Lock()
    for claim in claims.values():
        if claim.status != "free":
            unprepare(conn, claim, stats, lock)
    conn.close()
    node.stop()
    leftovers = [p.name for p in node.cdi_dir.iterdir()] if node.cdi_dir.is_dir() else []  # specs, claim files, temp files
    records = [p.name for p in node.paths.checkpoint.iterdir() if ".corrupt-" not in p.name] if node.paths.checkpoint.is_dir() else []
    locks_dir = node.paths.claim_locks_dir
    locks = [p.name for p in locks_dir.iterdir()] if locks_dir is not None and locks_dir.is_dir() else []
    if leftovers or records or locks:
        raise Violation(f"left after everything was unprepared: CDI {leftovers}, records {records}, claim locks {locks}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000, help="kill/restart rounds (default 1000)")
    parser.add_argument("--max-minutes", type=float, default=None, help="start no new round after this many minutes (default: no limit)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time-based, printed)")
    parser.add_argument("--concurrency", type=int, default=6, help="calls in flight per burst (default 6)")
    parser.add_argument("--single-instance", action="store_true", help="run without --pod-uid (deploy/ passes --pod-uid)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else time.time_ns() % 1_000_000
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="dra-kill-", dir="/tmp"))
    run_dir = Path(tempfile.mkdtemp(prefix="dra-kill-run-", dir="/dev/shm")) if Path("/dev/shm").is_dir() else work / "run"
    server = sim_apiserver.SimApiServer().start()
    node = Node(server, work, run_dir, args.single_instance)
    claims: dict[str, Claim] = {}
    stats = Stats()
    began = time.perf_counter()
    rounds = 0
    try:
        for round_no in range(args.rounds):
            if args.max_minutes is not None and time.perf_counter() - began > args.max_minutes * 60:
                break
            rounds += 1
            conn = restart(node, rng, stats)
            try:
                check_node(node, claims)
            except Violation:
                conn.close()
                raise
            burst(node, conn, claims, rng, args.concurrency, stats)
            if os.environ.get("BENCH_TRACE") and round_no % 50 == 0:
                print(f"round {round_no}: {summary(stats)}", flush=True)
        finish(node, claims, stats)
    except Violation as exc:
        print(f"VIOLATION after {len(stats.serving_s)} restarts (seed {seed}; daemon log {work / 'daemon.log'}): {exc}", flush=True)
        node.kill()
        server.stop()
        return 1
    node.kill()
    server.stop()
    print(f"seed {seed}: {rounds} rounds in {time.perf_counter() - began:.0f} s, {len(claims)} claims; {summary(stats)}")
    print("all invariants held")
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(run_dir, ignore_errors=True)
    return 0


def summary(stats: Stats) -> str:
    serving = sorted(stats.serving_s)
    pct = lambda q: serving[min(len(serving) - 1, int(len(serving) * q))] * 1000  # noqa: E731
    return (
        f"restarts {len(serving)} (+{stats.startup_kills} killed in start-up); restart-to-serving ms "
        f"p50 {pct(0.5):.0f} p90 {pct(0.9):.0f} max {serving[-1] * 1000:.0f}; prepared {stats.prepared}, refused {stats.refused}, "
        f"unprepared {stats.unprepared}, cut off by kills {stats.cut_off}"
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
