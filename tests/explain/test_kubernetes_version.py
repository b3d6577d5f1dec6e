"""--kubernetes-version 1.35|1.36|1.37: that release's gate defaults and device order, the cluster's own when one is read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import alloc_builders as b
import pytest
import yaml
from explain_testlib import claim_file, explain, fleet_list

from dra_driver.explain import parse_gates
from dra_driver.ingest.errors import InputError
from dra_driver.explain.gates import release_of
from dra_driver.simulation.api_server import ServerOptions, SimApiServer


@pytest.mark.parametrize(
    ("version", "on"),
    [
        ("1.35", {"admin_access"}),
        ("1.36", {"admin_access", "consumable_capacity", "extended_resource", "device_taints"}),
        ("1.37", {"admin_access", "consumable_capacity", "extended_resource", "device_taints", "device_taint_rules"}),
    ],
)
def test_each_release_has_its_own_defaults(version: str, on: set[str]) -> None:
    gates = parse_gates(None, version)
    modelled = ("admin_access", "consumable_capacity", "extended_resource", "device_taints", "device_taint_rules")
    assert {name for name in modelled if getattr(gates, name)} == on
    assert gates.kubernetes_version == version
    assert parse_gates("DRADeviceTaints=false", version).device_taints is False  # a given gate wins over the default


def test_a_gate_new_in_1_36_is_known_from_1_36_on() -> None:
    with pytest.raises(InputError, match="Kubernetes 1.35 has no gate"):
        parse_gates("DRAListTypeAttributes=true", "1.35")
    assert parse_gates("DRAListTypeAttributes=true", "1.36").ignored == ("DRAListTypeAttributes",)


def test_an_unknown_release_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(InputError, match=r"--kubernetes-version.*1\.35, 1\.36, 1\.37"):
        parse_gates(None, "1.34")


@pytest.mark.parametrize(
    ("git_version", "release", "noted"),
    [
        ("v1.36.2", "1.36", False),
        ("v1.35.6", "1.35", False),
        ("v1.38.0", "1.37", True),
        ("v1.34.3", "1.35", True),
        ("weird", "1.35", True),
        (None, "1.35", True),
    ],
)
def test_the_release_of_a_server(git_version: str | None, release: str, noted: bool) -> None:
    chosen, note = release_of(git_version)
    assert chosen == release and bool(note) == noted


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default"},
    "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}


@pytest.mark.parametrize(("version", "code"), [("1.35", 1), ("1.36", 0), ("1.37", 0)])
def test_nvidia_com_gpu_is_served_by_the_shipped_class_where_the_release_maps_extended_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str, code: int
) -> None:
    """1.35: DRAExtendedResource off, only a device plugin's allocatable serves it; 1.36 on: extended.gpu.nvidia.com does."""
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(POD))
    fleet = fleet_list(tmp_path, [b.resource_slice("node-0", [b.device("gpu-0")])])
    result, out, _ = explain(capsys, pod, "--fleet", fleet, "--kubernetes-version", version, "-o", "json")
    assert result == code
    assert json.loads(out)["fleet"]["kubernetesVersion"] == version


def test_the_text_names_the_release_and_its_device_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = claim_file(tmp_path, [b.exact("gpu")])
    fleet = fleet_list(tmp_path, [b.resource_slice("node-0", [b.device("gpu-0")])])
    _, old, _ = explain(capsys, claim, "--fleet", fleet, "--kubernetes-version", "1.35")
    _, new, _ = explain(capsys, claim, "--fleet", fleet, "--kubernetes-version", "1.36")
    assert "Kubernetes 1.35:" in old and "no fixed order" in old
    assert "Kubernetes 1.36:" in new and "pools by driver and pool name, slices by name" in new


@pytest.fixture
def cluster_136(tmp_path: Path) -> Iterator[Path]:
    with SimApiServer(ServerOptions(git_version="v1.36.2")) as server:
        server.add_node("node-0")
        server.store.put(b.resource_slice("node-0", [b.device("gpu-0")]))
        yield server.write_kubeconfig(tmp_path / "kubeconfig")


def test_a_cluster_brings_its_own_release_unless_one_is_given(cluster_136: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = claim_file(tmp_path, [b.exact("gpu")])
    _, out, _ = explain(capsys, claim, "--kubeconfig", cluster_136, "-o", "json")
    summary = json.loads(out)["fleet"]
    assert summary["kubernetesVersion"] == "1.36" and "DRAExtendedResource=on" in summary["featureGates"]
    _, out, _ = explain(capsys, claim, "--kubeconfig", cluster_136, "--kubernetes-version", "1.35", "-o", "json")
    summary = json.loads(out)["fleet"]
    assert summary["kubernetesVersion"] == "1.35" and "DRAExtendedResource=off" in summary["featureGates"]


def test_template_takes_the_release_for_its_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dra_driver.cli.main import main

    assert main(["template", "--vendor", "nvidia", "--count", "2", "--profile", "dgx-h100", "--kubernetes-version", "1.36"]) == 0
    assert "ResourceClaimTemplate" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        main(["template", "--vendor", "nvidia", "--kubernetes-version", "1.34"])
    assert refused.value.code == 2
