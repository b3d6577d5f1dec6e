"""The DaemonSet from the project's image on node-2, installed and removed exactly as docs/install.md says.

node-2 has the standard paths inside its namespace (/var/lib/kubelet, /var/run/cdi, /var/run/dra-driver,
/var/run/dra-driver-sim), bound from $CRI_HOME: the simulated overlay (section 7) runs there unchanged.
The rolling update is measured from the kubelet's side: its plugin registrations (its log) and the
registration sockets in its plugins_registry, sampled while a claim pod is created during the update.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from .daemonset import DRIVER, DS_NAMESPACE, DS_NAME, OVERLAY, ds_settled, install_simulated, remove_simulated
from .kit import Kit
from tests.support import eventually
from .workloads import NAMESPACE, claim_pod, claim_template, devices_of, seen_in, specs_naming


@pytest.fixture(scope="module")
def installed(node2: Kit) -> Iterator[Kit]:
    install_simulated(node2)
    try:
        yield node2
    finally:
        remove_simulated(node2)  # the uninstall test removes it; this removes what a failure left


def test_claim_pod_on_the_daemonset_node(installed: Kit):
    kit = installed
    kit.apply([claim_template("t-ds", "gpu.nvidia.com", 1), claim_pod("ds-pod", "t-ds", node="node-2")])
    kit.wait_pod_running(NAMESPACE, "ds-pod")
    claim = kit.claim_of(NAMESPACE, "ds-pod")
    assert len(devices_of(claim)) == 1
    seen = seen_in(kit, "ds-pod")
    assert len([n for n in seen.nodes if re.match(r"^/dev/nvidia\d+$", n)]) == 1, sorted(seen.nodes)
    assert "NVIDIA_VISIBLE_DEVICES" in seen.env
    uid = claim["metadata"]["uid"]
    kit.kubectl("-n", NAMESPACE, "delete", "pod", "ds-pod", "--wait=true", "--timeout=120s", timeout=180)
    eventually(lambda: not specs_naming(kit.cri_home / "run-cdi", uid), "CDI spec removed", 60, step=0.25)


@dataclass
class RegistrySampler:
    """Samples node-2's plugins_registry every 20 ms: the driver's registration sockets the kubelet dials."""

    directory: Path
    prefix: str
    samples: list[tuple[float, int]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                count = sum(1 for p in self.directory.iterdir() if p.name.startswith(self.prefix) and p.name.endswith("reg.sock"))
            except FileNotFoundError:
                count = 0
            self.samples.append((time.monotonic(), count))
            time.sleep(0.02)


KLOG_TIME = re.compile(r"^[IWE](\d{4} \d{2}:\d{2}:\d{2}\.\d{6})")


def registration_events(kit: Kit, since: datetime) -> list[tuple[datetime, str, str]]:
    """(time, 'register'|'deregister', endpoint) of gpu.nvidia.com in node-2's kubelet log after `since`."""
    events: list[tuple[datetime, str, str]] = []
    for line in kit.kubelet_log_lines("node-2", DRIVER):
        stamp = KLOG_TIME.match(line)
        if not stamp:
            continue
        when = datetime.strptime(f"{since.year}{stamp.group(1)}", "%Y%m%d %H:%M:%S.%f")
        if when < since:
            continue
        endpoint = re.search(r'endpoint="([^"]+)"', line)
        if '"Unregistered DRA plugin"' in line:  # kubelet cm/dra/plugin/dra_plugin_manager.go
            events.append((when, "deregister", endpoint.group(1) if endpoint else ""))
        elif '"Registered DRA plugin"' in line:
            events.append((when, "register", endpoint.group(1) if endpoint else ""))
    return events


def test_rolling_update_keeps_a_registered_plugin_and_prepares_a_claim_created_during_it(installed: Kit):
    kit = installed
    sampler = RegistrySampler(kit.node2_kubelet_dir / "plugins_registry", DRIVER)
    thread = threading.Thread(target=sampler.run, daemon=True)
    thread.start()
    started = datetime.utcnow().replace(microsecond=0)
    old_pods = {p["metadata"]["uid"] for p in kit.get("-n", DS_NAMESPACE, "pods")["items"]}
    t0 = time.monotonic()
    kit.kubectl("-n", DS_NAMESPACE, "rollout", "restart", f"daemonset/{DS_NAME}")
    # a claim pod created while the update runs: it must be prepared by whichever instance is registered
    eventually(
        lambda: {p["metadata"]["uid"] for p in kit.get("-n", DS_NAMESPACE, "pods")["items"]} - old_pods, "the new driver pod created", 60, step=0.25
    )
    kit.apply([claim_template("t-roll", "gpu.nvidia.com", 1), claim_pod("during-update", "t-roll", node="node-2")])
    kit.wait_pod_running(NAMESPACE, "during-update", timeout=180)
    eventually(
        lambda: ds_settled(kit) and not old_pods & {p["metadata"]["uid"] for p in kit.get("-n", DS_NAMESPACE, "pods")["items"]},
        "the rolling update done",
        240,
        step=1,
    )
    time.sleep(2)  # two more watcher periods of the kubelet after the old pod went
    sampler.stop.set()
    thread.join(5)
    duration = time.monotonic() - t0

    window = [count for at, count in sampler.samples if at >= t0]
    assert window and min(window) >= 1, f"a moment without a registration socket of {DRIVER} during the update ({len(window)} samples)"
    events = registration_events(kit, started)
    live: set[str] = set()
    gaps = []
    for when, kind, endpoint in events:
        if kind == "register":
            live.add(endpoint)
        else:
            live.discard(endpoint)
            if not live:
                gaps.append(when)
    assert not gaps, f"the kubelet had no registered {DRIVER} plugin at {gaps} (events: {events})"
    assert any(kind == "register" for _, kind, _ in events), f"no registration of the new pod in the kubelet log ({len(events)} events)"
    seen = seen_in(kit, "during-update")
    assert len([n for n in seen.nodes if re.match(r"^/dev/nvidia\d+$", n)]) == 1
    print(f"rolling update: {duration:.1f} s, {len(window)} samples, min sockets {min(window)}, kubelet events {events}")


def test_uninstall_in_the_documented_order(installed: Kit):
    kit = installed
    # 1. workloads with claims first, while the driver is there to unprepare them
    kit.kubectl("-n", NAMESPACE, "delete", "pods", "--all", "--wait=true", "--timeout=120s", timeout=180)
    # 2. the driver
    kit.kubectl("delete", "-k", str(OVERLAY), "--wait=true", "--timeout=180s", timeout=240)
    eventually(lambda: kit.kubectl("get", "namespace", DS_NAMESPACE, check=False).returncode != 0, "the dra-driver namespace gone", 180, step=1)
    terminating = [
        f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in kit.get("pods", "-A")["items"] if p["metadata"].get("deletionTimestamp")
    ]
    assert not terminating, f"left Terminating: {terminating}"
    # 3. the kubelet deletes the slices about 30 s after the last instance deregistered
    eventually(lambda: not kit.slices("node-2", DRIVER), "node-2's slices deleted by the kubelet", 120, step=1)

    # What stays on the node: only what docs/install.md's table lists.
    cdi_left = [p.name for p in (kit.cri_home / "run-cdi").iterdir()] if (kit.cri_home / "run-cdi").is_dir() else []
    assert not cdi_left, f"CDI specs left: {cdi_left}"
    plugins = kit.node2_kubelet_dir / "plugins"
    left_in_plugins = [str(p.relative_to(plugins)) for p in plugins.rglob("*") if not p.is_dir()] if plugins.is_dir() else []
    assert not left_in_plugins, f"files left under /var/lib/kubelet/plugins: {left_in_plugins}"
    registry = kit.node2_kubelet_dir / "plugins_registry"
    assert not [p.name for p in registry.iterdir() if p.name.startswith(DRIVER)], "registration sockets left"
    sim = kit.cri_home / "run-dra-driver-sim"
    sim_left = sorted(p.name for p in sim.iterdir()) if sim.is_dir() else []
    assert set(sim_left) <= {".lock"}, f"/var/run/dra-driver-sim keeps {sim_left}"
    state = kit.cri_home / "run-dra-driver"
    checkpoints = [p for p in state.glob("*/checkpoint.d/*")] if state.is_dir() else []
    assert not checkpoints, f"checkpoint records left: {checkpoints}"
    kit.kubectl("label", "node", "node-2", "dra-driver.io/accelerator-", check=False)
