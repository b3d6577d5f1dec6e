"""The observability of docs/monitoring.md installed from deploy/ in the kit's cluster and scraped by a real Prometheus.

The simulated overlay runs the DaemonSet on node-2 and `kubectl apply -k deploy/fleet-exporter` the exporter, as the
docs say. A claim pod is prepared on node-2 and another claim cannot fit. Pod IPs are not reachable from the host
in the kit (each pod's network namespace is linked to nothing), so both pods' metrics port comes out through
`kubectl port-forward` (the kubelet's streaming server and containerd). The kit has no prometheus-operator: the
Prometheus on the host scrapes the two forwarded ports with the target labels the PodMonitors give and loads
deploy/monitoring's rules as tests/monitoring renders them.
"""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.monitoring.live import (
    assert_every_check_answers_and_every_rule_loads, dashboard_and_alert_checks, prometheus_command, prometheus_config, query,
    spawn, stop, tails,
)  # fmt: skip
from tests.monitoring.manifests import tool

from .conftest import REPO
from .daemonset import DRIVER, DS_NAMESPACE, install_simulated, remove_simulated
from .kit import Kit, allocated_devices
from tests.support import eventually, free_port
from .workloads import NAMESPACE, claim_pod, claim_template

FLEET_EXPORTER = REPO / "deploy" / "fleet-exporter"
METRICS_PORT = 8080  # prometheus.io/port of both pods (DRA_DRIVER_METRICS_BIND_ADDRESS, --metrics-bind-address)
DEVICE_CLASS = "gpu.nvidia.com"
# Alerts whose condition this cluster cannot make true without breaking something on purpose; their metrics must
# still exist (tests/monitoring/test_live.py makes each of them true against a local daemon).
QUIET_IN_CLUSTER = {"DraPrepareErrorsRising", "DraMpsDaemonDown", "DraSlicesNotPublished"}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def running_pod(kit: Kit, namespace: str, app: str) -> str | None:
    """The name of a pod labelled app.kubernetes.io/name=`app` whose containers run, not being deleted.

    Not "Ready": the kit's kubelet probes the pod IP from the host, where no pod network exists, so the fleet
    exporter's httpGet probe is refused there; its /readyz is read through port-forward instead (scene)."""
    for pod in kit.get("-n", namespace, "pods", "-l", f"app.kubernetes.io/name={app}")["items"]:
        statuses = pod.get("status", {}).get("containerStatuses", [])
        if not pod["metadata"].get("deletionTimestamp") and statuses and all("running" in c.get("state", {}) for c in statuses):
            return str(pod["metadata"]["name"])
    return None


@pytest.fixture(scope="module")
def monitored(node2: Kit) -> Iterator[Kit]:
    kit = node2
    install_simulated(kit)
    try:
        kit.apply_k(FLEET_EXPORTER)
        eventually(lambda: running_pod(kit, DS_NAMESPACE, "dra-driver-fleet-exporter"), "the fleet exporter pod running", 180, step=1)
        yield kit
    finally:
        kit.kubectl("delete", "-k", str(FLEET_EXPORTER), "--ignore-not-found", "--wait=true", "--timeout=120s", check=False, timeout=180)
        remove_simulated(kit)


def scrape(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:  # noqa: S310 - loopback
        return str(answer.read().decode())


def samples(port: int) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(scrape(port)) for s in f.samples}


def answers(port: int, path: str = "/metrics") -> bool:
    try:
        return bool(scrape(port, path))
    except OSError:
        return False


@dataclass
class Scene:
    kit: Kit
    work: Path
    claim: str
    pool: str
    device: str
    plugin_port: int
    fleet_port: int
    logs: list[Path]


def port_forward(kit: Kit, pod: str, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    command = kit.kubectl_command("-n", DS_NAMESPACE, "port-forward", "--address", "127.0.0.1", f"pod/{pod}", f"{port}:{METRICS_PORT}")
    process = spawn(command, log)
    eventually(lambda: process.poll() is None and answers(port), f"/metrics of {pod} through kubectl port-forward", 60, step=0.5)
    return process, port


@pytest.fixture(scope="module")
def scene(monitored: Kit, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    """A claim pod prepared on node-2, a claim for 9 GPUs (the profile has 8) pending, both metrics ports forwarded."""
    kit = monitored
    work = Path(tmp_path_factory.mktemp("monitoring"))
    kit.apply([claim_template("t-mon", DEVICE_CLASS, 1), claim_pod("mon-pod", "t-mon", node="node-2")])
    kit.apply([claim_template("t-too-many", DEVICE_CLASS, 9), claim_pod("too-many", "t-too-many", node="node-2")])
    kit.wait_pod_running(NAMESPACE, "mon-pod")
    claim = kit.claim_of(NAMESPACE, "mon-pod")
    ((_, pool, device),) = allocated_devices(claim)
    plugin = running_pod(kit, DS_NAMESPACE, "dra-driver-kubelet-plugin")
    fleet = running_pod(kit, DS_NAMESPACE, "dra-driver-fleet-exporter")
    assert plugin and fleet
    logs = [work / "port-forward-plugin.log", work / "port-forward-fleet.log", work / "prometheus.log"]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        forward, plugin_port = port_forward(kit, plugin, logs[0])
        processes.append(forward)
        forward, fleet_port = port_forward(kit, fleet, logs[1])
        processes.append(forward)
        eventually(lambda: answers(fleet_port, "/readyz"), "the fleet exporter's /readyz", 60, step=1)
        yield Scene(kit, work, claim["metadata"]["name"], pool, device, plugin_port, fleet_port, logs)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{tails(logs)}") from None
    finally:
        for process in processes:
            stop(process)


def fleet_devices(fleet: Samples, state: str) -> dict[str, float]:
    """pool -> dra_fleet_devices of node-2, the driver and the class, in `state`."""
    found: dict[str, float] = {}
    for (name, labels), value in fleet.items():
        label = dict(labels)
        if (
            name == "dra_fleet_devices"
            and label["node"] == "node-2"
            and label["driver"] == DRIVER
            and label["device_class"] == DEVICE_CLASS
            and label["state"] == state
        ):
            found[label["pool"]] = found.get(label["pool"], 0) + value
    return found


def test_fleet_and_node_metrics_name_the_claim_and_its_device(scene: Scene) -> None:
    published = sum(len(s["spec"].get("devices") or []) for s in scene.kit.slices("node-2", DRIVER))
    # The exporter learns of the allocation through its watch: wait for it, then read one scrape.
    eventually(
        lambda: sum(fleet_devices(samples(scene.fleet_port), "allocated").values()) == 1, "the fleet exporter to count the claim's device", 60, step=1
    )
    fleet = samples(scene.fleet_port)
    total, allocated, free = (fleet_devices(fleet, state) for state in ("total", "allocated", "free"))
    assert allocated == {scene.pool: 1}, allocated
    assert 1 <= sum(total.values()) <= published, (total, published)
    assert sum(free.values()) == sum(total.values()) - 1, (free, total)
    pending = {
        dict(labels)["reason"]: value
        for (name, labels), value in fleet.items()
        if name == "dra_fleet_claims_pending" and dict(labels)["namespace"] == NAMESPACE
    }
    assert sum(pending.values()) >= 1, f"the claim for 9 GPUs (of 8) is not counted pending: {pending}"
    assert fleet[("dra_fleet_up", ())] == 1

    node = samples(scene.plugin_port)
    holders = [dict(labels) for (name, labels), value in node.items() if name == "dra_driver_device_holder_info" and value == 1]
    mine = [h for h in holders if (h["namespace"], h["claim"]) == (NAMESPACE, scene.claim)]
    assert len(mine) == 1, holders
    assert (mine[0]["driver"], mine[0]["pool"], mine[0]["device"], mine[0]["pod"]) == (DRIVER, scene.pool, scene.device, "mon-pod")
    assert mine[0]["uuid"], mine[0]
    infos = {
        dict(labels)["device"] for (name, labels), value in node.items() if name == "dra_driver_device_info" and dict(labels)["driver"] == DRIVER
    }
    assert scene.device in infos and len(infos) == published, (sorted(infos), published)
    print(f"fleet: total {total}, allocated {allocated}, free {free}, pending {pending}; holder {mine[0]}")


def test_prometheus_answers_every_dashboard_query_and_alert_expression(scene: Scene) -> None:
    prometheus = tool("prometheus", "apt-get install prometheus; .ci/run installs it when run as root")
    port = free_port()
    config = prometheus_config(scene.work, scene.plugin_port, scene.fleet_port, "node-2")
    process = spawn(prometheus_command(prometheus, config, scene.work, port), scene.logs[2])
    try:
        eventually(lambda: len(query(port, "up == 1")) == 2, "Prometheus scraping both pods", 90, step=0.5)
        # dra_driver_mps_daemon_up exists only while an MPS claim is prepared (tests/monitoring/test_live.py has one).
        checks = [check for check in dashboard_and_alert_checks(QUIET_IN_CLUSTER) if check[0] != "metric dra_driver_mps_daemon_up"]
        loaded = assert_every_check_answers_and_every_rule_loads(port, checks, scene.logs, 90, step=1)
        print(f"prometheus: {len(checks)} queries answered, {len(loaded)} rules loaded")
    finally:
        stop(process)
