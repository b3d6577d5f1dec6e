"""kill -9 of the driver and a kubelet restart with pods running: nothing lost, slices back, CDI specs cleaned."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import HostDriver, start_host_driver, stop_host_driver
from .kit import Kit
from tests.support import eventually
from .workloads import NAMESPACE, claim_pod, claim_template, devices_of, run_claim_pod, seen_in, specs_naming

DRIVER = "gpu.nvidia.com"
REGISTERED = rf'"Registered DRA plugin".*driverName="{DRIVER}"'


@pytest.fixture(scope="module")
def h100(node1: Kit, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostDriver]:
    driver = start_host_driver(node1, "dgx-h100", Path(tmp_path_factory.mktemp("recovery")), (DRIVER,))
    try:
        yield driver
    finally:
        stop_host_driver(node1, driver)


def _device_names(kit: Kit) -> set[str]:
    return {d["name"] for s in kit.slices("node-1", DRIVER) for d in s["spec"].get("devices", [])}


def _gpu_nodes(nodes: frozenset[str]) -> set[str]:
    return {n for n in nodes if re.match(r"^/dev/nvidia\d+$", n)}


def _registrations(kit: Kit) -> int:
    """Registrations of the driver in the running kubelet's log (kubelet-up.sh starts a new log per kubelet)."""
    return len(kit.kubelet_log_lines("node-1", REGISTERED))


def test_kill_9_of_the_driver_loses_nothing(h100: HostDriver):
    kit = h100.kit
    published = _device_names(kit)
    _, claim = run_claim_pod(kit, "before-kill", claim_template("t-kill", "gpu.nvidia.com", 2))
    held = devices_of(claim)
    seen_before = seen_in(kit, "before-kill")

    h100.kill9()
    h100.start()
    h100.wait_published(DRIVER)
    assert _device_names(kit) == published
    assert kit.pod(NAMESPACE, "before-kill")["status"]["phase"] == "Running"
    assert seen_in(kit, "before-kill").nodes == seen_before.nodes

    # The restarted driver knows what it prepared: a new pod gets other GPUs, and the old claim unprepares cleanly.
    kit.apply([claim_pod("after-kill", "t-kill")])
    kit.wait_pod_running(NAMESPACE, "after-kill")
    fresh = devices_of(kit.claim_of(NAMESPACE, "after-kill"))
    assert not set(fresh) & set(held), f"a device given twice: {held} and {fresh}"
    assert not _gpu_nodes(seen_in(kit, "after-kill").nodes) & _gpu_nodes(seen_before.nodes)  # nvidiactl, uvm are shared
    for pod in ("before-kill", "after-kill"):
        uid = kit.claim_of(NAMESPACE, pod)["metadata"]["uid"]
        kit.kubectl("-n", NAMESPACE, "delete", "pod", pod, "--wait=true", "--timeout=120s", timeout=180)
        eventually(lambda uid=uid: not specs_naming(kit.node1_cdi_dir, uid), f"CDI specs of {pod}'s claim removed", 60, step=0.25)


def test_kubelet_restart_with_pods_running(h100: HostDriver):
    kit = h100.kit
    published = _device_names(kit)
    _, claim = run_claim_pod(kit, "across-restart", claim_template("t-restart", "gpu.nvidia.com", 1))
    uid = claim["metadata"]["uid"]
    seen_before = seen_in(kit, "across-restart")
    assert _registrations(kit) >= 1

    kit.script("kubelet-down.sh", extra_env={"KEEP_CRI": "1"})  # containers keep running, as with a systemd restart
    kit.script("kubelet-up.sh")
    eventually(lambda: _registrations(kit) >= 1, "the restarted kubelet to register the driver again", 60, step=0.25)
    assert kit.pod(NAMESPACE, "across-restart")["status"]["phase"] == "Running"
    assert seen_in(kit, "across-restart").nodes == seen_before.nodes
    eventually(lambda: _device_names(kit) == published, "slices back after the kubelet restart", 60, step=0.25)
    assert h100.process is not None and h100.process.poll() is None, h100.tail()

    kit.kubectl("-n", NAMESPACE, "delete", "pod", "across-restart", "--wait=true", "--timeout=120s", timeout=180)
    eventually(lambda: not specs_naming(kit.node1_cdi_dir, uid), "CDI specs cleaned after delete", 60, step=0.25)
