"""A device plugin registered with the real kubelet's device manager offering two of the driver's GPUs.

The stand-in plugin (tests/e2e/device_plugin.py, device-plugin API v1beta1) offers gpu-0 and gpu-1 of the
simulated dgx-h100 by UUID as `nvidia.com/gpu`. Then: the driver withholds exactly those from its slices and
says so (annotation), `dra-driver doctor` names the plugin, and the scheduler gives `nvidia.com/gpu: 1` to
the device plugin (the Node advertises the resource) while claims get only the other six GPUs.

Kit note: the kubelet keeps `device-plugins/` under /var/lib/kubelet whatever its --root-dir, so in node-1's
namespace that is $K8S_HOME/var-lib-kubelet-node-1/device-plugins; the harness bind-mounts it at
`<kubelet-root>/device-plugins` on the host for the test, where a real node (root dir /var/lib/kubelet) has it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import HostDriver, REPO, start_host_driver, stop_host_driver
from .device_plugin import StandInDevicePlugin
from .kit import Kit
from tests.support import eventually
from .workloads import NAMESPACE, claim_pod, claim_template, devices_of, extended_resource_pod, seen_in

DRIVER = "gpu.nvidia.com"
PROFILE = "dgx-h100"


def _uuids() -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "dra_driver.cli.main", "discover", "--profile", PROFILE, "--node-name", "node-1", "-o", "json"],
        capture_output=True, text=True, check=True, cwd=REPO,
    )  # fmt: skip
    return {d["name"]: d["attributes"]["uuid"]["string"] for s in json.loads(done.stdout)["items"] for d in s["spec"].get("devices", [])}


@pytest.fixture(scope="module")
def device_plugin_dir(node1: Kit) -> Iterator[Path]:
    real = node1.home / "var-lib-kubelet-node-1" / "device-plugins"
    eventually(lambda: (real / "kubelet.sock").exists(), "the kubelet's device-manager socket", 60, step=0.25)
    seen_by_driver = node1.node1_kubelet_dir / "device-plugins"
    seen_by_driver.mkdir(exist_ok=True)
    subprocess.run(["mount", "--bind", str(real), str(seen_by_driver)], check=True)
    try:
        yield real
    finally:
        subprocess.run(["umount", str(seen_by_driver)], check=False)
        seen_by_driver.rmdir()


@pytest.fixture(scope="module")
def plugin_and_driver(
    node1: Kit, device_plugin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[StandInDevicePlugin, HostDriver]]:
    uuids = _uuids()
    plugin = StandInDevicePlugin(device_plugin_dir, "nvidia.com/gpu", [uuids["gpu-0"], uuids["gpu-1"]])
    plugin.start()
    try:
        eventually(
            lambda: node1.get("node", "node-1")["status"].get("allocatable", {}).get("nvidia.com/gpu") == "2",
            "nvidia.com/gpu in node-1's allocatable",
            60,
            step=0.25,
        )
        driver = start_host_driver(node1, PROFILE, Path(tmp_path_factory.mktemp("coexistence")), (DRIVER,))
        try:
            yield plugin, driver
        finally:
            stop_host_driver(node1, driver)
    finally:
        plugin.stop()


def test_the_driver_withholds_what_the_device_plugin_offers_and_says_so(node1: Kit, plugin_and_driver):
    plugin, driver = plugin_and_driver

    def published() -> set[str] | None:
        names = {d["name"] for s in node1.slices("node-1", DRIVER) for d in s["spec"].get("devices", [])}
        return names if names == {f"gpu-{i}" for i in range(2, 8)} else None

    eventually(published, "gpu-0 and gpu-1 withheld from the slices", 90, step=0.25)
    annotations = [s["metadata"].get("annotations", {}).get("dra-driver.io/withheld-devices", "") for s in node1.slices("node-1", DRIVER)]
    text = "\n".join(annotations)
    assert re.search(r"^gpu-0: ", text, re.M) and re.search(r"^gpu-1: ", text, re.M), text

    command = driver.command()
    doctor = subprocess.run(
        [*command[:3], "doctor", *command[command.index("run") + 1 :], "-o", "json"], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    report = json.loads(doctor.stdout)
    plugin_checks = [c for c in _checks(report) if c.get("name") == "device-plugins"]
    assert plugin_checks, f"doctor has no device-plugins check: {doctor.stdout[:2000]}"
    described = json.dumps(plugin_checks)
    assert "nvidia" in described and "withheld" in described.lower(), described


def _checks(report: object) -> list[dict]:
    if isinstance(report, dict):
        for key in ("checks", "results"):
            if isinstance(report.get(key), list):
                return report[key]
    return report if isinstance(report, list) else []


def test_the_scheduler_gives_the_extended_resource_to_the_plugin_and_claims_the_rest(node1: Kit, plugin_and_driver):
    plugin, _ = plugin_and_driver
    # nvidia.com/gpu is in the Node's allocatable: the scheduler and kubelet use the device plugin, not the class mapping
    node1.apply([extended_resource_pod("plugin-gpu", "nvidia.com/gpu", 1)])
    node1.wait_pod_running(NAMESPACE, "plugin-gpu")
    assert plugin.allocated and len(plugin.allocated[-1]) == 1
    assert "E2E_DEVICE_PLUGIN_IDS" in seen_in(node1, "plugin-gpu").env
    assert not node1.get("-n", NAMESPACE, "pod", "plugin-gpu")["status"].get("extendedResourceClaimStatus")

    # claims see six GPUs: six fit, seven do not
    node1.apply([claim_template("t-six", "gpu.nvidia.com", 6), claim_pod("six", "t-six")])
    node1.wait_pod_running(NAMESPACE, "six")
    assert set(devices_of(node1.claim_of(NAMESPACE, "six"))) == {f"gpu-{i}" for i in range(2, 8)}
    node1.kubectl("-n", NAMESPACE, "delete", "pod", "six", "--wait=true", "--timeout=120s", timeout=180)
    node1.apply([claim_template("t-seven", "gpu.nvidia.com", 7), claim_pod("seven", "t-seven")])
    eventually(lambda: _unschedulable(node1, "seven"), "the scheduler's verdict on seven GPUs", 60, step=0.25)
    node1.kubectl("-n", NAMESPACE, "delete", "pod", "seven", "plugin-gpu", "--wait=true", "--timeout=120s", timeout=180)


def _unschedulable(kit: Kit, pod: str) -> bool:
    conditions = (kit.pod(NAMESPACE, pod) or {}).get("status", {}).get("conditions", [])
    return any(c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable" for c in conditions)
