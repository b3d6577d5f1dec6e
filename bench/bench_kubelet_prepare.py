"""Kubelet-side prepare latency under the real kubelet with containerd: this driver against the upstream Go test driver.

    DRA_KIT=/tmp/k8s python bench/bench_kubelet_prepare.py --pods 40

Needs the loopback kit (docs/e2e.md: `up.sh`, `kubelet-up.sh`, `bin/dra-test-driver` built from the same
Kubernetes source) and root. It starts a fresh control plane and node-1, then for each driver in turn:
starts it on node-1 as a host process, runs `--pods` pods one at a time, each with one claim of one device
(a whole GPU of the simulated `--profile` for this driver, one of the test driver's devices for the Go
one), and reads the kubelet's own figures from its /metrics (its port on 127.0.0.1, with the kit's admin
client certificate: the API server's node proxy refuses loopback node addresses) before and after each pod:
`dra_grpc_operations_duration_seconds` (the kubelet's gRPC client interceptor around
NodePrepareResources / NodeUnprepareResources of that driver, pkg/kubelet/cm/dra/plugin/dra_plugin.go) and
`dra_operations_duration_seconds` (the kubelet's whole PrepareResources / UnprepareResources of a pod,
pkg/kubelet/cm/dra/manager.go, which also reads the claim and writes the kubelet's checkpoint). The
histograms' buckets start at 0.1 s, so each pod's exact duration is the change of `_sum` while the pod is
the only one (the change of `_count` is checked: a pod whose calls are not exactly one is reported, not used).

`--drivers` picks and orders what runs in each of `--rounds` rounds: `ours` (this driver as deploy/ runs it,
--state-dir on a tmpfs), `ours-ext4` (--state-dir on ext4), `ours-cache` (--claim-cache), `go` (the test driver).
With `--phases` this driver runs under bench/phase_timers (its medians per step are printed at the end); with
`--strace N` a last pass of N pods per driver runs with `strace -f -c` attached to the driver (file syscalls
and fsyncs counted; `--strace-full` prints every call with its time instead; strace slows the driver, so that
pass is not timed); with `--idle S` each driver's CPU over S idle seconds is printed before its pods.
Stops everything it started (node-1, control plane) unless `--keep-cluster` or `--reuse-cluster`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "bench-kp"
NODE = "node-1"
KUBELET_PORT = 10250  # node-1's kubelet, on 127.0.0.1 (the kit's README)
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # the kit's sandbox image, already in each node's containerd
GO_DRIVER = "test-driver.cdi.k8s.io"
T = TypeVar("T")
METRIC_LINE = re.compile(r"^(dra_grpc_operations_duration_seconds|dra_operations_duration_seconds)_(sum|count)\{(.*)\} (\S+)$")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@dataclass
class Kit:
    home: Path

    def script(self, name: str, *args: str) -> None:
        env = {**os.environ, "K8S_HOME": str(self.home)}
        done = subprocess.run([str(self.home / name), *args], env=env, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise SystemExit(f"{name} {' '.join(args)} failed ({done.returncode}): {done.stdout[-1500:]}{done.stderr[-1500:]}")

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        command = [str(self.home / "bin" / "kubectl"), "--kubeconfig", str(self.home / "kubeconfig"), *args]
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120)
        if check and done.returncode != 0:
            raise SystemExit(f"kubectl {' '.join(args)} failed: {done.stderr.strip()[-1500:]}")
        return done.stdout

    def apply(self, objects: list[dict[str, Any]]) -> None:
        self.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


class Api:
    """The kubernetes client on the kit's admin kubeconfig: pod phases and the kubelet's /metrics, without a
    kubectl process per poll (the bench's own CPU would otherwise compete with the kubelet on 2 cores)."""

    def __init__(self, home: Path) -> None:
        from kubernetes import client, config

        self.core = client.CoreV1Api(config.new_client_from_config(str(home / "kubeconfig")))
        # The API server's node proxy refuses loopback node addresses ("address not allowed"): the kubelet's
        # own port, with the admin client certificate its x509 authentication trusts (kit CA).
        self.tls = ssl.create_default_context(cafile=str(home / "pki" / "ca.crt"))
        self.tls.check_hostname = False  # the serving certificate names the node, not 127.0.0.1
        self.tls.load_cert_chain(str(home / "pki" / "admin.crt"), str(home / "pki" / "admin.key"))

    def phase(self, name: str) -> str | None:
        from kubernetes.client.exceptions import ApiException

        try:
            pod = self.core.read_namespaced_pod(name, NAMESPACE)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return str(pod.status.phase) if pod.status else None

    def dra_metrics(self) -> dict[tuple[str, str, str], float]:
        """(metric, sum|count, labels) -> value of the kubelet's two DRA duration histograms."""
        connection = http.client.HTTPSConnection("127.0.0.1", KUBELET_PORT, context=self.tls, timeout=30)
        try:
            connection.request("GET", "/metrics")
            text = connection.getresponse().read().decode()
        finally:
            connection.close()
        values: dict[tuple[str, str, str], float] = {}
        for line in text.splitlines():
            match = METRIC_LINE.match(line)
            if match:
                values[(match.group(1), match.group(2), match.group(3))] = float(match.group(4))
        return values


def delta(before: dict[tuple[str, str, str], float], after: dict[tuple[str, str, str], float], metric: str, must: str) -> tuple[float, int]:
    """(seconds, calls) added between two scrapes to `metric`'s series whose labels contain `must`."""
    seconds = calls = 0.0
    for (name, kind, labels), value in after.items():
        if name != metric or must not in labels:
            continue
        change = value - before.get((name, kind, labels), 0.0)
        if kind == "sum":
            seconds += change
        else:
            calls += change
    return seconds, int(round(calls))


@dataclass
class Driver:
    name: str  # the DRA driver name the kubelet labels its metrics with
    label: str
    device_class: dict[str, Any]
    command: list[str]
    env: dict[str, str]
    log: Path
    cleanup: Path | None = None  # a directory of this driver outside the bench's work dir
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=REPO)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        self.process = None


@dataclass
class Samples:
    grpc_prepare: list[float] = field(default_factory=list)
    grpc_unprepare: list[float] = field(default_factory=list)
    kubelet_prepare: list[float] = field(default_factory=list)
    kubelet_unprepare: list[float] = field(default_factory=list)
    skipped: int = 0


# This driver's variants: where its --state-dir lives, and whether it reads claims from its LIST+WATCH cache.
# `ours` is the shipped layout (--state-dir /var/run/dra-driver, a tmpfs); the kit's node keeps the CDI
# directory on ext4 (kubelet-aux/cdi) for both drivers, as containerd there reads it.
VARIANTS = {
    "ours": ("tmpfs", ()),
    "ours-ext4": ("ext4", ()),
    "ours-cache": ("tmpfs", ("--claim-cache",)),
}
TMPFS = Path("/dev/shm")


def our_driver(kit: Kit, work: Path, profile: str, variant: str, phases: bool) -> Driver:
    where, extra = VARIANTS[variant]
    home = work / variant
    state = (Path(tempfile.mkdtemp(prefix=f"kp-{variant}-", dir=TMPFS)) if where == "tmpfs" else home) / "state"
    env = {**os.environ, "TMPDIR": str(home / "tmp")}
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    if phases:
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "bench" / "phase_timers"), env.get("PYTHONPATH", "")])
        env["DRA_BENCH_PHASES_OUT"] = str(work / f"phases-{variant}.txt")
    kubelet_dir = kit.home / "kubelet-root"
    command = [
        sys.executable, "-m", "dra_driver.cli.main", "run", "--profile", profile,
        "--simulated-root", str(home / "sim"), "--node-name", NODE,
        "--kubelet-dir", str(kubelet_dir), "--cdi-dir", str(kit.home / "kubelet-aux" / "cdi"),
        "--kubeconfig", str(kit.home / "kubeconfig"), "--state-dir", str(state),
        "--pod-resources-socket", str(kubelet_dir / "pod-resources" / "kubelet.sock"), *extra,
    ]  # fmt: skip
    device_class = {"metadata": {"name": "gpu.nvidia.com"}}  # shipped in deviceclasses/
    label = f"dra-driver {variant} ({profile}, state on {where}{', ' + ' '.join(extra) if extra else ''})"
    return Driver("gpu.nvidia.com", label, device_class, command, env, home / "driver.log", cleanup=state.parent if where == "tmpfs" else None)


def go_driver(kit: Kit, work: Path) -> Driver:
    kubelet_dir = kit.home / "kubelet-root"
    command = [
        str(kit.home / "bin" / "dra-test-driver"), "--kubeconfig", str(kit.home / "kubeconfig"), "kubelet-plugin",
        "--node-name", NODE, "--num-devices", "8", "--plugin-registration-path", str(kubelet_dir / "plugins_registry"),
        "--datadir", str(kubelet_dir / "plugins"), "--cdi-dir", str(kit.home / "kubelet-aux" / "cdi"),
    ]  # fmt: skip
    # it makes the parent of its socket directory only (app/server.go), so the directory itself is made here
    (kubelet_dir / "plugins" / GO_DRIVER).mkdir(parents=True, exist_ok=True)
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "bench-test-driver"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GO_DRIVER}"'}}]},
    }
    return Driver(GO_DRIVER, "upstream Go test driver", device_class, command, dict(os.environ), work / "go-driver.log")


def template_and_pod(name: str, device_class: str) -> list[dict[str, Any]]:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"spec": {"devices": {"requests": [{"name": "r0", "exactly": {"deviceClassName": device_class, "count": 1}}]}}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "acc", "resourceClaimTemplateName": name}],
            "containers": [{"name": "work", "image": PAUSE_IMAGE, "imagePullPolicy": "Never", "resources": {"claims": [{"name": "acc"}]}}],
        },
    }
    return [template, pod]


def registered(kit: Kit, driver: str, before: int) -> bool:
    log = kit.home / "logs" / "kubelet.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    return len(re.findall(rf'"Registered DRA plugin".*driverName="{re.escape(driver)}"', text)) > before


def slices_published(kit: Kit, driver: str) -> bool:
    items = json.loads(kit.kubectl("get", "resourceslices", "--field-selector", f"spec.nodeName={NODE}", "-o", "json"))["items"]
    return any(s["spec"]["driver"] == driver and s["spec"].get("devices") for s in items)


def run_pods(kit: Kit, api: Api, driver: Driver, pods: int, tag: str, samples: Samples | None) -> None:
    """`pods` pods one after another: Running, then deleted and gone; the kubelet's durations of each."""
    class_name = driver.device_class["metadata"]["name"]
    for i in range(pods):
        name = f"{tag}-{i}"
        before = api.dra_metrics()
        kit.apply(template_and_pod(name, class_name))
        wait_for(f"pod {name} Running", lambda: api.phase(name) == "Running", 120)
        prepared = api.dra_metrics()
        kit.kubectl("-n", NAMESPACE, "delete", "pod", name, "--wait=false")
        wait_for(f"pod {name} gone", lambda: api.phase(name) is None, 120)
        # the kubelet unprepares once the pod's containers are gone; the pod object can vanish first
        wait_for(
            f"unprepare of {name}",
            lambda: delta(prepared, api.dra_metrics(), "dra_grpc_operations_duration_seconds", "NodeUnprepareResources")[1] >= 1,
            60,
            0.1,
        )
        done = api.dra_metrics()
        kit.kubectl("-n", NAMESPACE, "delete", "resourceclaimtemplate", name, "--wait=false")
        if samples is None:
            continue
        gp = delta(before, prepared, "dra_grpc_operations_duration_seconds", "NodePrepareResources")
        gu = delta(prepared, done, "dra_grpc_operations_duration_seconds", "NodeUnprepareResources")
        kp = delta(before, prepared, "dra_operations_duration_seconds", 'operation_name="PrepareResources"')
        ku = delta(prepared, done, "dra_operations_duration_seconds", 'operation_name="UnprepareResources"')
        if (gp[1], gu[1]) != (1, 1):
            samples.skipped += 1
            continue
        samples.grpc_prepare.append(gp[0])
        samples.grpc_unprepare.append(gu[0])
        # PrepareResources runs on every pod sync (a no-op once prepared): its first call is the one that
        # prepares, and the later ones add their (tiny) durations to the sum; per pod is what a pod pays
        samples.kubelet_prepare.append(kp[0])
        samples.kubelet_unprepare.append(ku[0])


STRACE_SYSCALLS = "fsync,fdatasync,syncfs,openat,write,rename,renameat,renameat2,unlink,unlinkat,mkdir,mkdirat,flock,fcntl"


def strace_pass(kit: Kit, api: Api, driver: Driver, pods: int, out: Path, full: bool) -> str:
    """`pods` pods with strace attached to the driver: its summary (-c), or with `full` every call with its time."""
    assert driver.process is not None
    mode = (
        ["-tt", "-T", "-e", f"trace={STRACE_SYSCALLS},read,connect,sendto,recvfrom,sendmsg,recvmsg"]
        if full
        else ["-c", "-e", f"trace={STRACE_SYSCALLS}"]
    )
    tracer = subprocess.Popen(
        ["strace", "-f", *mode, "-o", str(out), "-p", str(driver.process.pid)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(1.0)  # strace attaches to every thread before the first pod
    run_pods(kit, api, driver, pods, "st", None)
    tracer.send_signal(signal.SIGINT)
    tracer.wait(timeout=60)
    return out.read_text() if out.exists() else "(no strace output)"


def idle_cpu_ms_per_s(pid: int, seconds: float) -> float:
    """The process's CPU (user + system, /proc/<pid>/stat) per second of wall time over `seconds` of doing nothing asked."""

    def cpu_s() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    before, start = cpu_s(), time.monotonic()
    time.sleep(seconds)
    return (cpu_s() - before) / (time.monotonic() - start) * 1000


def ms(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.2f}"


def report(label: str, s: Samples) -> None:
    print(f"\n{label}: {len(s.grpc_prepare)} pods ({s.skipped} left out: not exactly one call each)")
    print(f"  {'kubelet figure':<58} {'p50 ms':>8} {'p90 ms':>8} {'mean ms':>8}")
    for what, values in (
        ("gRPC NodePrepareResources (dra_grpc_operations_duration)", s.grpc_prepare),
        ("gRPC NodeUnprepareResources", s.grpc_unprepare),
        ("PrepareResources of the pod (dra_operations_duration)", s.kubelet_prepare),
        ("UnprepareResources of the pod", s.kubelet_unprepare),
    ):
        mean = f"{statistics.fmean(values) * 1000:.2f}" if values else "-"
        print(f"  {what:<58} {ms(values, 0.5):>8} {ms(values, 0.9):>8} {mean:>8}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=40, help="timed pods per driver, one at a time")
    parser.add_argument("--warmup", type=int, default=3, help="untimed pods per driver first")
    parser.add_argument("--profile", default="dgx-h100")
    parser.add_argument("--drivers", default="ours,go", help=f"comma list of {', '.join([*VARIANTS, 'go'])}, run in that order each round")
    parser.add_argument("--rounds", type=int, default=1, help="alternate the drivers this many times (pods per round)")
    parser.add_argument("--idle", type=float, default=0, metavar="S", help="first, the driver's CPU over S seconds idle")
    parser.add_argument("--phases", action="store_true", help="this driver under bench/phase_timers; medians printed")
    parser.add_argument("--strace", type=int, default=0, metavar="N", help="then N pods per driver under strace -c")
    parser.add_argument("--strace-full", action="store_true", help="the strace pass prints every call with -tt -T, not -c")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the control plane and node-1 running")
    parser.add_argument("--reuse-cluster", action="store_true", help="use the running control plane and node-1")
    args = parser.parse_args()

    home = os.environ.get("DRA_KIT", "")
    if not home or not (Path(home) / "kubelet-up.sh").exists() or not (Path(home) / "bin" / "dra-test-driver").exists():
        print("DRA_KIT must name an installed loopback kit with bin/dra-test-driver (docs/e2e.md)", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("needs root (the kit's node uses mount namespaces, containerd and cgroups)", file=sys.stderr)
        return 2
    kit = Kit(Path(home))
    work = Path(tempfile.mkdtemp(prefix="kp-", dir="/tmp"))
    wanted = [d.strip() for d in args.drivers.split(",") if d.strip()]
    unknown = [d for d in wanted if d != "go" and d not in VARIANTS]
    if unknown:
        print(f"--drivers: unknown {', '.join(unknown)}; choose from {', '.join([*VARIANTS, 'go'])}", file=sys.stderr)
        return 2
    drivers = {key: go_driver(kit, work) if key == "go" else our_driver(kit, work, args.profile, key, args.phases) for key in wanted}
    samples = {key: Samples() for key in wanted}
    print(f"kit {home}, load average before: {os.getloadavg()}", flush=True)
    try:
        if not args.reuse_cluster:
            kit.script("up.sh", "--fresh")
            kit.script("kubelet-up.sh", "--fresh")
        kit.kubectl("create", "namespace", NAMESPACE, check=False)
        api = Api(kit.home)
        kit.kubectl("apply", "-k", str(REPO / "deviceclasses"))  # the shipped classes: gpu.nvidia.com for this driver
        kit.apply([go_driver(kit, work).device_class])
        for round_ in range(args.rounds):
            for key in wanted:
                driver = drivers[key]
                log = kit.home / "logs" / "kubelet.log"
                before = (
                    len(re.findall(rf'"Registered DRA plugin".*driverName="{re.escape(driver.name)}"', log.read_text(errors="replace")))
                    if log.exists()
                    else 0
                )
                driver.start()
                wait_for(f"{driver.label} slices", lambda: slices_published(kit, driver.name), 120, 0.5)
                wait_for(f"{driver.label} registered", lambda: registered(kit, driver.name, before), 60, 0.2)
                if args.idle and driver.process is not None:
                    time.sleep(5)  # start-up work done (first reconcile, recovery)
                    idle = idle_cpu_ms_per_s(driver.process.pid, args.idle)
                    print(f"round {round_ + 1} {driver.label}: idle CPU {idle:.1f} ms/s over {args.idle:.0f} s", flush=True)
                run_pods(kit, api, driver, args.warmup, f"w{round_}{key}", None)
                run_pods(kit, api, driver, args.pods, f"p{round_}{key}", samples[key])
                print(f"round {round_ + 1} {driver.label}: done, load average {os.getloadavg()}", flush=True)
                if args.strace and round_ == args.rounds - 1:
                    text = strace_pass(kit, api, driver, args.strace, work / f"strace-{key}.txt", args.strace_full)
                    print(
                        f"\nstrace -f {'-tt -T' if args.strace_full else '-c'} of {driver.label}, "
                        f"{args.strace} pods (prepare + unprepare each):\n{text}",
                        flush=True,
                    )
                driver.stop()
                for item in json.loads(kit.kubectl("get", "resourceslices", "-o", "json"))["items"]:
                    if item["spec"]["driver"] == driver.name:
                        kit.kubectl("delete", "resourceslice", item["metadata"]["name"], "--wait=false", check=False)
        for key in wanted:
            report(drivers[key].label, samples[key])
        go = samples.get("go")
        for key in wanted:
            ours = samples[key]
            if key != "go" and go and ours.grpc_prepare and go.grpc_prepare:
                ratio = statistics.median(ours.grpc_prepare) / statistics.median(go.grpc_prepare)
                whole = statistics.median(ours.kubelet_prepare) / statistics.median(go.kubelet_prepare)
                print(f"ratio {key} / Go test driver, p50: gRPC prepare x{ratio:.2f}, kubelet PrepareResources x{whole:.2f}")
        print(f"load average after: {os.getloadavg()}")
        for key in wanted:
            phases = work / f"phases-{key}.txt"
            if phases.exists():
                print(f"\nphase timers of {drivers[key].label} (medians of its calls):\n{phases.read_text()}")
    finally:
        for driver in drivers.values():
            driver.stop()
            if driver.cleanup is not None:
                shutil.rmtree(driver.cleanup, ignore_errors=True)
        if not args.keep_cluster and not args.reuse_cluster:
            kit.script("kubelet-down.sh")
            kit.script("down.sh")
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
