"""The driver as a host process on node-1: pods with claims reach Running under containerd with exactly their devices.

What a container got is read from inside it (kubectl exec: its character devices, its environment, the driver
files mounted into it) and compared with what the allocation and the driver's CDI specs say; after the pod is
deleted, the claim's CDI specs are gone.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import HostDriver, start_host_driver, stop_host_driver
from .kit import Kit
from tests.support import eventually
from .workloads import NAMESPACE, claim_pod, claim_template, devices_of, extended_resource_pod, run_claim_pod, seen_in, spec_edits, specs_naming


@dataclass(frozen=True)
class Case:
    id: str
    profile: str
    driver: str
    device_class: str
    count: int
    extra: tuple[str, ...] = ()
    per_device_nodes: str = ""  # a regex every allocated device adds one node for (checked by count)


CASES = [
    Case("nvidia-1-gpu", "dgx-h100", "gpu.nvidia.com", "gpu.nvidia.com", 1, per_device_nodes=r"^/dev/nvidia\d+$"),
    Case("nvidia-2-gpus", "dgx-h100", "gpu.nvidia.com", "gpu.nvidia.com", 2, per_device_nodes=r"^/dev/nvidia\d+$"),
    Case("mig-static", "dgx-a100-mig", "gpu.nvidia.com", "mig-1g.5gb.nvidia.com", 2),
    Case("mig-dynamic", "dgx-a100-mig", "gpu.nvidia.com", "mig-3g.20gb.nvidia.com", 1, ("--partitioning", "dynamic")),
    Case("amd-partitions", "mi300x-cpx", "gpu.amd.com", "partition.gpu.amd.com", 2),
    Case("amd-gpus", "mi300x", "gpu.amd.com", "gpu.amd.com", 2),
    Case("gaudi", "gaudi2-hls", "gaudi.intel.com", "gaudi.intel.com", 2, per_device_nodes=r"^/dev/accel/accel\d+$"),
]


class Drivers:
    """One host driver at a time; a case with another profile (or flags) stops the previous one first."""

    def __init__(self, kit: Kit, root: Path) -> None:
        self.kit = kit
        self.root = root
        self.current: tuple[tuple[str, tuple[str, ...]], HostDriver] | None = None

    def get(self, case: Case) -> HostDriver:
        key = (case.profile, case.extra)
        if self.current is not None and self.current[0] == key:
            return self.current[1]
        self.close()
        work = self.root / f"{case.profile}{'-'.join(('',) + tuple(a.strip('-') for a in case.extra))}"
        work.mkdir(parents=True, exist_ok=True)
        self.current = (key, start_host_driver(self.kit, case.profile, work, (case.driver,), *case.extra))
        return self.current[1]

    def close(self) -> None:
        if self.current is not None:
            stop_host_driver(self.kit, self.current[1])
            self.current = None


@pytest.fixture(scope="module")
def drivers(node1: Kit, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Drivers]:
    pool = Drivers(node1, Path(tmp_path_factory.mktemp("host-drivers")))
    try:
        yield pool
    finally:
        pool.close()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_claim_pod_runs_with_exactly_its_devices(drivers: Drivers, case: Case):
    kit = drivers.kit
    driver = drivers.get(case)
    pod = f"{case.id}"
    running, claim = run_claim_pod(kit, pod, claim_template(f"t-{case.id}", case.device_class, case.count))
    assert running["spec"]["nodeName"] == "node-1"
    devices = devices_of(claim)
    assert len(devices) == case.count and len(set(devices)) == case.count, devices

    edits = spec_edits(kit.node1_cdi_dir, claim["metadata"]["uid"])
    assert edits.files, f"no CDI spec for claim {claim['metadata']['uid']} in {kit.node1_cdi_dir}"
    seen = seen_in(kit, pod)
    vendor_in_specs = {n for n in edits.nodes if n.startswith("/dev/")}
    assert seen.nodes == vendor_in_specs, f"container has {sorted(seen.nodes)}, specs name {sorted(vendor_in_specs)}"
    if case.per_device_nodes:
        assert len([n for n in seen.nodes if re.match(case.per_device_nodes, n)]) == case.count, sorted(seen.nodes)
    missing_env = {k: v for k, v in edits.env.items() if seen.env.get(k) != v}
    assert not missing_env, f"env of the specs missing in the container: {missing_env}"
    if edits.mounts:  # driver files (NVIDIA's simulated driver root): there inside the container
        absent = kit.exec(NAMESPACE, pod, "for m in " + " ".join(sorted(edits.mounts)) + '; do test -e "$m" || echo "$m"; done')
        assert absent.strip() == "", f"mounted driver files missing in the container: {absent}"
    if case.driver == "gpu.nvidia.com":
        smi = kit.exec(NAMESPACE, pod, "nvidia-smi")  # the simulated driver root's binary, mounted by the spec
        assert re.search(r"driver \d+\.\d+\.\d+", smi), smi

    uid = claim["metadata"]["uid"]
    kit.kubectl("-n", NAMESPACE, "delete", "pod", pod, "--wait=true", "--timeout=120s", timeout=180)
    eventually(lambda: not specs_naming(kit.node1_cdi_dir, uid), f"CDI specs of claim {uid} removed", 60, step=0.25)
    assert driver.process is not None and driver.process.poll() is None, driver.tail()


GAUDI = next(c for c in CASES if c.id == "gaudi")
NVIDIA = next(c for c in CASES if c.id == "nvidia-1-gpu")


def _taints(kit: Kit, driver: str, device: str) -> list[dict]:
    return [t for s in kit.slices("node-1", driver) for d in s["spec"].get("devices", []) if d["name"] == device for t in d.get("taints", [])]


def _pod_scheduled(kit: Kit, pod: str) -> bool:
    conditions = (kit.pod(NAMESPACE, pod) or {}).get("status", {}).get("conditions", [])
    return any(c["type"] == "PodScheduled" and c["status"] == "True" for c in conditions)


def test_unhealthy_device_is_not_allocated_and_its_taint_goes_when_healthy_again(drivers: Drivers):
    """Gaudi health comes from sysfs `status` (polled every 10 s): the simulated tree's file is the hardware here."""
    kit = drivers.kit
    driver = drivers.get(GAUDI)
    devices = [d for s in kit.slices("node-1", GAUDI.driver) for d in s["spec"].get("devices", [])]
    victim = devices[0]
    bdf = victim["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
    status_files = list(driver.work.glob(f"tmp-*/**/bus/pci/devices/{bdf}/status"))
    assert len(status_files) == 1, f"the simulated sysfs status of {bdf}: {status_files}"
    status = status_files[0]

    status.write_text("In reset\n")
    eventually(lambda: _taints(kit, GAUDI.driver, victim["name"]), f"a taint on {victim['name']}", 60, step=0.25)
    kit.apply([claim_template("t-all-gaudi", GAUDI.device_class, len(devices)), claim_pod("all-gaudi", "t-all-gaudi")])
    time.sleep(15)  # several scheduling attempts: the tainted device must not be allocated in any of them
    assert not _pod_scheduled(kit, "all-gaudi"), "a claim for every device was allocated while one was tainted"

    status.write_text("Operational\n")
    eventually(lambda: not _taints(kit, GAUDI.driver, victim["name"]), f"the taint on {victim['name']} removed", 60, step=0.25)
    kit.wait_pod_running(NAMESPACE, "all-gaudi", timeout=120)
    assert victim["name"] in devices_of(kit.claim_of(NAMESPACE, "all-gaudi"))
    kit.kubectl("-n", NAMESPACE, "delete", "pod", "all-gaudi", "--wait=true", "--timeout=120s", timeout=180)


def _health_in_pod_status(kit: Kit, pod: str, device: str) -> str | None:
    """The device's health in the pod's status (KEP-4680: containerStatuses[].allocatedResourcesStatus)."""
    for container in (kit.pod(NAMESPACE, pod) or {}).get("status", {}).get("containerStatuses", []):
        for entry in container.get("allocatedResourcesStatus") or []:
            for resource in entry.get("resources") or []:
                # the kubelet names the device by its CDI ID: k8s.<driver>/device=<claim uid>-<node>-<device>
                if str(resource.get("resourceID", "")).endswith(f"-{device}"):
                    return str(resource.get("health"))
    return None


def test_device_health_reaches_the_pod_status_through_the_health_stream(drivers: Drivers):
    """The kubelet reads the driver's DRAResourceHealth stream (ResourceHealthStatus) and shows it in the pod's status;
    the claim tolerates the NoExecute taint, so the pod is not evicted meanwhile."""
    kit = drivers.kit
    kit.require_kubelet_gate("node-1", "ResourceHealthStatus", "the kubelet neither reads the health stream nor writes allocatedResourcesStatus")
    driver = drivers.get(GAUDI)
    template = claim_template("t-tolerating", GAUDI.device_class, 1)
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": "gaudi.intel.com/unhealthy", "operator": "Exists", "effect": "NoExecute"}
    ]
    _, claim = run_claim_pod(kit, "watched", template)
    [device] = devices_of(claim)
    eventually(lambda: _health_in_pod_status(kit, "watched", device) == "Healthy", f"{device} Healthy in the pod status", 90, step=0.25)
    slice_device = next(d for s in kit.slices("node-1", GAUDI.driver) for d in s["spec"].get("devices", []) if d["name"] == device)
    bdf = slice_device["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
    [status] = list(driver.work.glob(f"tmp-*/**/bus/pci/devices/{bdf}/status"))
    status.write_text("Needs reset\n")
    try:
        eventually(lambda: _health_in_pod_status(kit, "watched", device) == "Unhealthy", f"{device} Unhealthy in the pod status", 90, step=0.25)
    finally:
        status.write_text("Operational\n")
    eventually(lambda: _health_in_pod_status(kit, "watched", device) == "Healthy", f"{device} Healthy again in the pod status", 90, step=0.25)
    assert kit.pod(NAMESPACE, "watched")["status"]["phase"] == "Running"
    kit.kubectl("-n", NAMESPACE, "delete", "pod", "watched", "--wait=true", "--timeout=120s", timeout=180)


def test_extended_resource_pod_runs_through_the_shipped_class(drivers: Drivers):
    """`nvidia.com/gpu: 1` in a pod's limits, served by extended.gpu.nvidia.com's extendedResourceName (DRAExtendedResource)."""
    kit = drivers.kit
    # Measured on a 1.36.2 control plane with 1.35.6 kubelets at their defaults: the scheduler allocates the
    # claim, the kubelet ignores it, and the container runs WITHOUT the GPU (docs/migration.md, "skew").
    kit.require_kubelet_gate("node-1", "DRAExtendedResource", "the kubelet would start the container without preparing the scheduler's claim")
    drivers.get(NVIDIA)
    kit.apply([extended_resource_pod("extended", "nvidia.com/gpu", 1)])
    kit.wait_pod_running(NAMESPACE, "extended")
    seen = seen_in(kit, "extended")
    assert len([n for n in seen.nodes if re.match(r"^/dev/nvidia\d+$", n)]) == 1, sorted(seen.nodes)
    statuses = kit.get("-n", NAMESPACE, "pod", "extended")["status"].get("extendedResourceClaimStatus")
    assert statuses, "the scheduler made no claim for the extended resource"
    kit.kubectl("-n", NAMESPACE, "delete", "pod", "extended", "--wait=true", "--timeout=120s", timeout=180)
