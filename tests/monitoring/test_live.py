"""A real Prometheus on loopback scrapes a real `dra-driver run --profile` daemon and a real `dra-driver
fleet-exporter` against the simulated API server; every dashboard query and every alert expression (without its
threshold) must return series, so a metric renamed in the code, or misspelt in a rule or a panel, fails here."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

import pytest
import yaml
from manifests import alerts, panel_queries, tool, write_rules

from tests.support import eventually
from dra_driver.backend.interface import ClaimRef
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.simulation.api_server import SimApiServer
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.sockets import PluginPaths

pytest.importorskip("dra_driver_nvidia.backend")
DRIVER = "gpu.nvidia.com"
NODE = "node-a"
PLUGIN_JOB = "dra-driver/dra-driver-kubelet-plugin"  # the job names the PodMonitors give
FLEET_JOB = "dra-driver/dra-driver-fleet-exporter"
MPS = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": {"strategy": "MPS"}}
DEADLINE_S = 60.0
# An alert expression ends in one comparison with a number: what is left is the series it compares.
THRESHOLD = re.compile(r"\s*(==|!=|>=|<=|>|<)\s*[0-9.]+\s*$")
# Alerts whose condition the scene cannot make true; for them the metrics the expression names must exist (a rename
# still fails), not the filtered series. None now: node-b's pool is half published, so DraSlicesNotPublished has a series.
QUIET_IN_SCENE: set[str] = set()


def free_port() -> int:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - loopback URL built here
        return json.loads(answer.read())


def query(port: int, promql: str) -> list[Any]:
    """The series an instant query returns (empty on a query error: the caller names the query)."""
    try:
        answer = get_json(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    except OSError:
        return []
    return list(answer["data"]["result"]) if answer.get("status") == "success" else []


def metric_names(promql: str) -> set[str]:
    """The metric names a query reads (identifiers followed by a selector or range, not functions or labels)."""
    return set(re.findall(r"\b((?:dra_driver|dra_fleet)_[a-z_]+)\b", promql))


def half_published_slice(node: str) -> dict[str, Any]:
    """The first of two slices of a pool's generation, the second never written: a publisher that stopped half-way."""
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{DRIVER}-0"},
        "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 2}, "devices": []},
    }  # fmt: skip


def plugin_command(server: SimApiServer, work: Path, port: int) -> list[str]:
    for kubelet_dir in ("plugins_registry", "plugins"):  # the kubelet's, which run never makes
        (work / "k" / kubelet_dir).mkdir(parents=True, exist_ok=True)
    (work / "c").mkdir(exist_ok=True)
    return [
        sys.executable, "-m", "dra_driver.cli.main", "run", "--profile", "dgx-h100", "--node-name", NODE,
        "--api-server", server.url, "--metrics-bind-address", f"127.0.0.1:{port}",
        "--kubelet-dir", str(work / "k"), "--state-dir", str(work / "s"), "--cdi-dir", str(work / "c"), "--simulated-root", "none",
    ]  # fmt: skip


def fleet_exporter_command(kubeconfig: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "dra_driver.cli.main", "fleet-exporter", "--kubeconfig", str(kubeconfig), "--metrics-bind-address", f"127.0.0.1:{port}"]


def prometheus_config(work: Path, plugin_port: int, fleet_port: int) -> Path:
    """Scrape both every second, with the target labels the PodMonitors give; load the alert rules too."""
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(write_rules(work))],
        "scrape_configs": [
            {"job_name": PLUGIN_JOB, "static_configs": [{"targets": [f"127.0.0.1:{plugin_port}"], "labels": {"node": NODE, "kubernetes_pod": "plugin-0"}}]},
            {"job_name": FLEET_JOB, "static_configs": [{"targets": [f"127.0.0.1:{fleet_port}"], "labels": {"kubernetes_pod": "fleet-exporter-0"}}]},
        ],
    }
    path = work / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def scene(short_tmp: Path) -> Iterator[tuple[int, list[Path]]]:
    """The Prometheus port once both targets are up, with a claim prepared under MPS, a failed prepare, a
    pending claim and a node whose slices are stale; the logs of the three processes for failure messages."""
    prometheus = tool("prometheus", "apt-get install prometheus; .ci/run installs it when run as root")
    logs = [short_tmp / "plugin.log", short_tmp / "fleet-exporter.log", short_tmp / "prometheus.log"]
    with ExitStack() as stack:
        server = stack.enter_context(SimApiServer())
        kubeconfig = server.write_kubeconfig(short_tmp / "kubeconfig")
        held = server.store.put(allocated_claim_object("train", "ml", DRIVER, NODE, {"gpu": ["gpu-0"]}, config=[{"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": MPS}}]))
        held["status"]["reservedFor"] = [{"resource": "pods", "name": "trainer-0", "uid": "uid-trainer-0"}]
        held = server.store.put(held)
        pending = allocated_claim_object("waiting", "ml", DRIVER, NODE, {"gpu": ["gpu-1"]})
        server.store.put({key: value for key, value in pending.items() if key != "status"})
        server.store.put(half_published_slice("node-b"))  # the fleet exporter reports node-b's slices as stale

        plugin_port, fleet_port, prometheus_port = free_port(), free_port(), free_port()
        plugin = spawn(plugin_command(server, short_tmp, plugin_port), logs[0])
        stack.callback(stop, plugin)
        paths = PluginPaths(short_tmp / "k", DRIVER)
        eventually(paths.registration_socket.exists, "the daemon's registration socket", DEADLINE_S, step=0.2, details=lambda: tails(logs))
        with closing(register(paths.registration_socket)) as conn:
            ref = ClaimRef("ml", "train", held["metadata"]["uid"])
            assert conn.prepare([ref]).claims[ref.uid].error == ""
            missing = ClaimRef("ml", "gone", "00000000-0000-0000-0000-000000000000")
            assert conn.prepare([missing]).claims[missing.uid].error != ""  # a prepare error, for the error series
        exporter = spawn(fleet_exporter_command(kubeconfig, fleet_port), logs[1])
        stack.callback(stop, exporter)
        args = [
            prometheus, f"--config.file={prometheus_config(short_tmp, plugin_port, fleet_port)}",
            f"--storage.tsdb.path={short_tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prometheus_port}",
        ]  # fmt: skip
        server_process = spawn(args, logs[2])
        stack.callback(stop, server_process)
        eventually(lambda: len(query(prometheus_port, "up == 1")) == 2, "both targets up", DEADLINE_S, step=0.2, details=lambda: tails(logs))
        yield prometheus_port, logs


def test_every_panel_query_and_alert_expression_returns_series(scene: tuple[int, list[Path]]) -> None:
    port, logs = scene
    checks = [(f"panel {title!r}", promql) for title, promql in panel_queries()]
    checks += [(f"alert {a['alert']}", THRESHOLD.sub("", a["expr"])) for a in alerts() if a["alert"] not in QUIET_IN_SCENE]
    names = {name for _, promql in checks for name in metric_names(promql)}
    names |= {name for a in alerts() for name in metric_names(a["expr"])}
    checks += [(f"metric {name}", f'count({{__name__="{name}"}})') for name in sorted(names)]
    empty: list[str] = []

    def all_answer() -> bool:
        empty[:] = [f"{what}: {promql}" for what, promql in checks if not query(port, promql)]
        return not empty

    try:
        eventually(all_answer, "every query to return series", DEADLINE_S, step=0.2, details=lambda: tails([]))
    except AssertionError:
        tails = "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}" for log in logs)
        raise AssertionError("no series for:\n  " + "\n  ".join(empty) + "\n" + tails) from None
    rules = get_json(f"http://127.0.0.1:{port}/api/v1/rules")["data"]["groups"]
    assert [(r["name"], r["health"]) for g in rules for r in g["rules"] if r["health"] != "ok"] == []
    assert sorted(r["name"] for g in rules for r in g["rules"]) == sorted(a["alert"] for a in alerts())


def tails(logs: list[Path]) -> str:
    """The end of each process's log, for a failure message."""
    return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for log in logs if log.exists())
