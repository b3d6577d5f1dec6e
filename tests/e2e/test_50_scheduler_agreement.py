"""`dra-driver explain --kubeconfig` against the real kube-scheduler, claim by claim (issue #29, docs/e2e.md).

node-1's host driver publishes dgx-h100, then dgx-a100-mig (both static). For every claim of the corpus (examples/claims and the claims
below, all naming shipped DeviceClasses), explain reads the running cluster and gives its verdict (exit 0:
allocatable, 1: not); then the claim and a pod using it are created, and the scheduler's verdict is the pod's
PodScheduled condition (True, or False with reason Unschedulable). Pod and claim are deleted before the next claim,
so every claim sees the same free node. The test asserts that the verdicts agree for every claim.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import REPO, HostDriver, start_host_driver, stop_host_driver
from .kit import Kit
from tests.support import eventually
from .workloads import NAMESPACE, claim_pod

PROFILES = ("dgx-h100", "dgx-a100-mig")  # whole GPUs; then MIG slices (the corpus's MIG claims become allocatable)
SCHEDULE_TIMEOUT = 60.0  # the scheduler's first attempt takes well under a second; this only bounds a hang


def _claim(name: str, requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": {"devices": devices}}


def _exactly(name: str, device_class: str, count: int = 1, cel: str = "", mode: str = "") -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if mode:
        exactly["allocationMode"] = mode
    else:
        exactly["count"] = count
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    return {"name": name, "exactly": exactly}


MEMORY = 'device.capacity["gpu.nvidia.com"].memory'
INLINE: list[dict[str, Any]] = [
    _claim("gpu-1", [_exactly("r", "gpu.nvidia.com")]),
    _claim("gpu-8", [_exactly("r", "gpu.nvidia.com", 8)]),
    _claim("gpu-9", [_exactly("r", "gpu.nvidia.com", 9)]),
    _claim("gpu-all", [_exactly("r", "gpu.nvidia.com", mode="All")]),
    _claim("gpu-4-plus-4", [_exactly("a", "gpu.nvidia.com", 4), _exactly("b", "gpu.nvidia.com", 4)]),
    _claim("gpu-5-plus-4", [_exactly("a", "gpu.nvidia.com", 5), _exactly("b", "gpu.nvidia.com", 4)]),
    _claim("mem-80gi", [_exactly("r", "gpu.nvidia.com", cel=f'{MEMORY}.compareTo(quantity("79Gi")) >= 0')]),
    _claim("mem-200gi", [_exactly("r", "gpu.nvidia.com", cel=f'{MEMORY}.compareTo(quantity("200Gi")) >= 0')]),
    _claim("product-h100", [_exactly("r", "gpu.nvidia.com", 2, cel='device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")')]),
    _claim("product-a100", [_exactly("r", "gpu.nvidia.com", cel='device.attributes["gpu.nvidia.com"].productName.contains("A100")')]),
    _claim("cc-9", [_exactly("r", "gpu.nvidia.com", cel='device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("8.9.0"))')]),
    _claim(
        "cc-10", [_exactly("r", "gpu.nvidia.com", cel='device.attributes["gpu.nvidia.com"].cudaComputeCapability.compareTo(semver("10.0.0")) >= 0')]
    ),
    _claim("index-0", [_exactly("r", "gpu.nvidia.com", cel='device.attributes["gpu.nvidia.com"].index == 0')]),
    _claim("index-in", [_exactly("r", "gpu.nvidia.com", 3, cel='device.attributes["gpu.nvidia.com"].index in [1, 3, 5]')]),
    _claim("index-in-short", [_exactly("r", "gpu.nvidia.com", 3, cel='device.attributes["gpu.nvidia.com"].index in [1, 3]')]),
    _claim("missing-attr-guarded", [_exactly("r", "gpu.nvidia.com", cel='has(device.attributes["gpu.nvidia.com"].nope)')]),
    _claim("pcie-root", [_exactly("r", "gpu.nvidia.com", 2)], [{"requests": ["r"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]),
    _claim("domain-8", [_exactly("r", "gpu.nvidia.com", 8)], [{"requests": ["r"], "matchAttribute": "dra-driver.io/interconnectDomain"}]),
    _claim("large-memory-4", [_exactly("r", "large-memory.dra-driver.io", 4)]),
    _claim("nvlink-8", [_exactly("r", "nvlink.dra-driver.io", 8)]),
    _claim("scale-up-2", [_exactly("r", "scale-up.dra-driver.io", 2)]),
    _claim("accelerator-3", [_exactly("r", "accelerator.dra-driver.io", 3)]),
    _claim("hopper-or-cdna3-8", [_exactly("r", "hopper-or-cdna3.dra-driver.io", 8)]),
    _claim("ampere-or-cdna2", [_exactly("r", "ampere-or-cdna2.dra-driver.io")]),
    _claim("xgmi", [_exactly("r", "xgmi.dra-driver.io")]),
    _claim("amd-gpu", [_exactly("r", "gpu.amd.com")]),
    _claim("gaudi", [_exactly("r", "gaudi.intel.com")]),
    _claim("mig-any", [_exactly("r", "mig.nvidia.com")]),
    _claim("mig-1g10gb", [_exactly("r", "mig-1g.10gb.nvidia.com")]),
    _claim(
        "first-available-9-else-2",
        [
            {
                "name": "r",
                "firstAvailable": [
                    {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 9},
                    {"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 2},
                ],
            }
        ],
    ),
    _claim(
        "first-available-mig-else-amd",
        [{"name": "r", "firstAvailable": [{"name": "mig", "deviceClassName": "mig.nvidia.com"}, {"name": "amd", "deviceClassName": "gpu.amd.com"}]}],
    ),
]


def _as_claim(document: dict[str, Any]) -> dict[str, Any]:
    """A ResourceClaimTemplate's claim as a plain ResourceClaim: the pod then names it, and deleting it is explicit."""
    if document["kind"] == "ResourceClaimTemplate":
        return {
            "apiVersion": document["apiVersion"],
            "kind": "ResourceClaim",
            "metadata": dict(document["metadata"]),
            "spec": document["spec"]["spec"],
        }
    return document


def _corpus() -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    for path in sorted((REPO / "examples" / "claims").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") in ("ResourceClaim", "ResourceClaimTemplate"):
                found.append((f"examples/claims/{path.name}", _as_claim(document)))
    found.extend((f"inline/{c['metadata']['name']}", c) for c in INLINE)
    return found


CORPUS = _corpus()


@dataclass(frozen=True)
class Verdicts:
    explain: bool
    scheduler: bool
    scheduler_message: str
    explain_tail: str


@pytest.fixture(scope="module", params=PROFILES)
def host_driver(request: pytest.FixtureRequest, node1: Kit, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostDriver]:
    # The shipped classes again: test_30's documented uninstall deletes them with the DaemonSet's base.
    node1.apply_k(REPO / "deviceclasses")
    driver = start_host_driver(node1, request.param, Path(tmp_path_factory.mktemp("agreement")), ("gpu.nvidia.com",))
    try:
        yield driver
    finally:
        stop_host_driver(node1, driver)


def _cluster_minor(kit: Kit) -> str:
    return ".".join(kit.version().lstrip("v").split(".")[:2])


def _explain(kit: Kit, claim_file: Path) -> tuple[bool, str]:
    done = subprocess.run(
        [sys.executable, "-m", "dra_driver.cli.main", "explain", str(claim_file), "--kubeconfig", str(kit.kubeconfig),
         "--kubernetes-version", _cluster_minor(kit)],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-8:])
    assert done.returncode in (0, 1), f"explain exited {done.returncode} (neither a verdict): {tail}"
    return done.returncode == 0, tail


def _scheduled(kit: Kit, pod: str) -> tuple[bool, str] | None:
    current = kit.pod(NAMESPACE, pod)
    for condition in (current or {}).get("status", {}).get("conditions", []) or []:
        if condition.get("type") != "PodScheduled":
            continue
        if condition.get("status") == "True":
            return True, ""
        if condition.get("reason") == "Unschedulable":
            return False, str(condition.get("message", ""))
    return None


def _verdicts(kit: Kit, name: str, claim: dict[str, Any], work: Path) -> Verdicts:
    claim = {**claim, "metadata": {"name": name, "namespace": NAMESPACE}}
    claim_file = work / f"{name}.yaml"
    claim_file.write_text(yaml.safe_dump(claim))
    explain_ok, tail = _explain(kit, claim_file)
    pod = claim_pod(f"{name}-pod", "unused")
    pod["spec"]["resourceClaims"] = [{"name": "acc", "resourceClaimName": name}]
    kit.apply([claim, pod])
    try:
        scheduled, message = eventually(lambda: _scheduled(kit, f"{name}-pod"), f"PodScheduled of {name}-pod", SCHEDULE_TIMEOUT, step=0.25)
    finally:
        kit.kubectl("-n", NAMESPACE, "delete", "pod", f"{name}-pod", "--wait=true", "--timeout=120s", check=False, timeout=180)
        kit.kubectl("-n", NAMESPACE, "delete", "resourceclaim", name, "--wait=true", "--timeout=120s", check=False, timeout=180)
    return Verdicts(explain_ok, scheduled, message, tail)


def test_explain_agrees_with_the_scheduler(host_driver: HostDriver, tmp_path: Path):
    kit = host_driver.kit
    results: dict[str, Verdicts] = {}
    for index, (source, claim) in enumerate(CORPUS):
        results[source] = _verdicts(kit, f"agree-{index}", claim, tmp_path)
    lines = [
        f"{source}: explain {'allocatable' if v.explain else 'not'}, scheduler {'scheduled' if v.scheduler else 'unschedulable'}"
        for source, v in results.items()
    ]
    print(f"\nscheduler agreement on {kit.version()} ({host_driver.profile}):\n" + "\n".join(lines))
    differ = {source: v for source, v in results.items() if v.explain != v.scheduler}
    agree = len(results) - len(differ)
    print(f"{agree} of {len(results)} agree")
    assert not differ, "explain and the scheduler differ:\n" + "\n".join(
        f"{source}: explain {v.explain} ({v.explain_tail}); scheduler {v.scheduler} ({v.scheduler_message})" for source, v in differ.items()
    )
    # The corpus must exercise both verdicts, or agreement would say little.
    assert any(v.scheduler for v in results.values()) and not all(v.scheduler for v in results.values())
