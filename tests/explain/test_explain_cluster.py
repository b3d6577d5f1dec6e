"""explain --kubeconfig against the in-process API server, through the real kubernetes client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import alloc_builders as b
import pytest
import yaml

from dra_driver.cli.main import main
from dra_driver.simulation.api_server import SimApiServer


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[SimApiServer, Path]]:
    with SimApiServer() as server:
        yield server, server.write_kubeconfig(tmp_path / "kubeconfig")


def test_cluster_slices_classes_and_allocated_claims(cluster: tuple[SimApiServer, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server, kubeconfig = cluster
    server.store.put(b.resource_slice("node-0", [b.device("gpu-0"), b.device("gpu-1")]))
    server.store.put(b.class_doc("any-gpu.example.com", [f'device.driver == "{b.NV}"']))
    server.store.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-0", "labels": {"zone": "a"}}})
    held = b.claim_doc([b.exact("gpu", "any-gpu.example.com")], name="other")
    held["status"] = {"allocation": {"devices": {"results": [{"request": "gpu", "driver": b.NV, "pool": "node-0", "device": "gpu-0"}]}}}
    server.store.put(held)
    claim = tmp_path / "claim.yaml"
    claim.write_text(yaml.safe_dump(b.claim_doc([b.exact("gpu", "any-gpu.example.com")])))
    code = main(["explain", str(claim), "--kubeconfig", str(kubeconfig), "-o", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["allocations"]["default/claim"]["devices"]["results"][0]["device"] == "gpu-1"
    assert report["fleet"]["allocatedElsewhere"] == 1


def test_unreachable_cluster_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = tmp_path / "claim.yaml"
    claim.write_text(yaml.safe_dump(b.claim_doc([b.exact("gpu")])))
    assert main(["explain", str(claim), "--kubeconfig", str(tmp_path / "missing")]) == 2
    assert "kubeconfig" in capsys.readouterr().err


def test_cluster_device_taint_rules(cluster: tuple[SimApiServer, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server, kubeconfig = cluster
    server.store.put(b.resource_slice("node-0", [b.device("gpu-0")]))
    server.store.put(b.class_doc("any-gpu.example.com", [f'device.driver == "{b.NV}"']))
    rule = {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "drain"},
        "spec": {"deviceSelector": {"pool": "node-0"}, "taint": {"key": "drain", "effect": "NoExecute"}},
    }
    server.store.put(rule)
    claim = tmp_path / "claim.yaml"
    claim.write_text(yaml.safe_dump(b.claim_doc([b.exact("gpu", "any-gpu.example.com")])))
    code = main(["explain", str(claim), "--kubeconfig", str(kubeconfig), "--feature-gates", "DRADeviceTaintRules=true"])
    assert code == 1 and "tainted drain:NoExecute" in capsys.readouterr().out


def test_cluster_namespace_labels_decide_admin_access(cluster: tuple[SimApiServer, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server, kubeconfig = cluster
    server.store.put(b.resource_slice("node-0", [b.device("gpu-0")]))
    server.store.put(b.class_doc("any-gpu.example.com", [f'device.driver == "{b.NV}"']))
    server.store.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {}}})
    claim = tmp_path / "claim.yaml"
    claim.write_text(yaml.safe_dump(b.claim_doc([b.exact("gpu", "any-gpu.example.com", adminAccess=True)])))
    assert main(["explain", str(claim), "--kubeconfig", str(kubeconfig)]) == 2
    assert "resource.kubernetes.io/admin-access" in capsys.readouterr().err
    server.store.put(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {"resource.kubernetes.io/admin-access": "true"}}}
    )
    assert main(["explain", str(claim), "--kubeconfig", str(kubeconfig)]) == 0


def test_cluster_without_an_extended_resource_class_says_insufficient(
    cluster: tuple[SimApiServer, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cluster has no DeviceClass with extendedResourceName nvidia.com/gpu (the shipped one is not installed there)."""
    server, kubeconfig = cluster
    server.store.put(b.resource_slice("node-0", [b.device("gpu-0"), b.device("gpu-1")]))
    server.store.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-0"}, "status": {"allocatable": {"cpu": "8"}}})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod))
    argv = ["explain", str(path), "--kubeconfig", str(kubeconfig), "--feature-gates", "DRAExtendedResource=true"]
    assert main(argv) == 1
    assert "Insufficient nvidia.com/gpu" in capsys.readouterr().out
    mapped = b.class_doc("extended.gpu.nvidia.com", [f'device.driver == "{b.NV}"'])
    mapped["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    server.store.put(mapped)
    assert main(argv) == 0  # now the scheduler serves it through DRA
    capsys.readouterr()


def test_a_dump_with_the_clusters_classes_is_read_like_the_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """kubectl get resourceslices,deviceclasses,nodes -o yaml: the classes there are all the cluster has."""
    slices = [b.resource_slice("node-0", [b.device("gpu-0")])]
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-0"}, "status": {"allocatable": {"cpu": "8"}}}
    own = b.class_doc("any-gpu.example.com", [f'device.driver == "{b.NV}"'])
    dump = tmp_path / "dump.yaml"
    dump.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [*slices, own, node]}))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(pod))
    assert main(["explain", str(path), "--fleet", str(dump), "--feature-gates", "DRAExtendedResource=true"]) == 1
    assert "Insufficient nvidia.com/gpu" in capsys.readouterr().out  # the shipped extended.gpu.nvidia.com is not there
    claim = tmp_path / "claim.yaml"
    claim.write_text(yaml.safe_dump(b.claim_doc([b.exact("gpu", "gpu.nvidia.com")])))
    assert main(["explain", str(claim), "--fleet", str(dump)]) == 2
    assert "DeviceClass 'gpu.nvidia.com' does not exist" in capsys.readouterr().err


def test_fleet_files_without_classes_say_the_shipped_ones_are_assumed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "slices.yaml"
    fleet.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [b.resource_slice("node-0", [b.device("gpu-0")])]}))
    claim = tmp_path / "claim.yaml"
    claim.write_text(yaml.safe_dump(b.claim_doc([b.exact("gpu", "gpu.nvidia.com")])))
    assert main(["explain", str(claim), "--fleet", str(fleet)]) == 0
    out = capsys.readouterr().out
    assert "Note: DeviceClass gpu.nvidia.com: the fleet files hold no DeviceClasses, so explain adds the shipped ones" in out
    assert main(["explain", str(claim), "--profile", "dgx-h100"]) == 0
    assert "shipped ones" not in capsys.readouterr().out  # a simulated node runs this driver, with its classes


def test_a_cluster_without_the_shipped_classes_does_not_get_them(
    cluster: tuple[SimApiServer, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server, kubeconfig = cluster
    server.store.put(b.resource_slice("node-0", [b.device("gpu-0")]))
    claim = tmp_path / "claim.yaml"
    claim.write_text(yaml.safe_dump(b.claim_doc([b.exact("gpu", "gpu.nvidia.com")])))
    assert main(["explain", str(claim), "--kubeconfig", str(kubeconfig)]) == 2
    assert "DeviceClass 'gpu.nvidia.com' does not exist" in capsys.readouterr().err
