"""A real Prometheus on loopback scrapes a real `dra-driver run --profile` daemon and a real `dra-driver
fleet-exporter` against the simulated API server; every dashboard query and every alert expression (without its
threshold) must return series, so a metric renamed in the code, or misspelt in a rule or a panel, fails here."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

import pytest

from tests.monitoring.live import (
    assert_every_check_answers_and_every_rule_loads, dashboard_and_alert_checks, prometheus_command, prometheus_config, query,
    spawn, stop, tails,
)  # fmt: skip
from tests.monitoring.manifests import tool
from tests.support import eventually, free_port
from dra_driver.backend.interface import ClaimRef
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.simulation.api_server import SimApiServer
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.sockets import PluginPaths

pytest.importorskip("dra_driver_nvidia.backend")
DRIVER = "gpu.nvidia.com"
NODE = "node-a"
MPS = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": {"strategy": "MPS"}}
DEADLINE_S = 60.0
# Alerts whose condition the scene cannot make true; for them the metrics the expression names must exist (a rename
# still fails), not the filtered series. None now: node-b's pool is half published, so DraSlicesNotPublished has a series.
QUIET_IN_SCENE: set[str] = set()


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
    return [
        sys.executable,
        "-m",
        "dra_driver.cli.main",
        "fleet-exporter",
        "--kubeconfig",
        str(kubeconfig),
        "--metrics-bind-address",
        f"127.0.0.1:{port}",
    ]


@pytest.fixture
def scene(short_tmp: Path) -> Iterator[tuple[int, list[Path]]]:
    """The Prometheus port once both targets are up, with a claim prepared under MPS, a failed prepare, a
    pending claim and a node whose slices are stale; the logs of the three processes for failure messages."""
    prometheus = tool("prometheus", "apt-get install prometheus; .ci/run installs it when run as root")
    logs = [short_tmp / "plugin.log", short_tmp / "fleet-exporter.log", short_tmp / "prometheus.log"]
    with ExitStack() as stack:
        server = stack.enter_context(SimApiServer())
        kubeconfig = server.write_kubeconfig(short_tmp / "kubeconfig")
        held = server.store.put(
            allocated_claim_object(
                "train",
                "ml",
                DRIVER,
                NODE,
                {"gpu": ["gpu-0"]},
                config=[{"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": MPS}}],
            )
        )
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
        config = prometheus_config(short_tmp, plugin_port, fleet_port, NODE)
        server_process = spawn(prometheus_command(prometheus, config, short_tmp, prometheus_port), logs[2])
        stack.callback(stop, server_process)
        eventually(lambda: len(query(prometheus_port, "up == 1")) == 2, "both targets up", DEADLINE_S, step=0.2, details=lambda: tails(logs))
        yield prometheus_port, logs


def test_every_panel_query_and_alert_expression_returns_series(scene: tuple[int, list[Path]]) -> None:
    port, logs = scene
    assert_every_check_answers_and_every_rule_loads(port, dashboard_and_alert_checks(QUIET_IN_SCENE), logs, DEADLINE_S, step=0.2)
