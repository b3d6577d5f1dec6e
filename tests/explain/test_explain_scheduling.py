"""explain places pods the way kube-scheduler does: reused claims tie the pod to their node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import alloc_builders as b
import pytest
from explain_testlib import NV, class_docs, explain, fleet_list, nodes, write_yaml


def _pod(claims: list[dict[str, str]], namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "x"}], "resourceClaims": claims},
    }


TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "one-gpu", "namespace": "ml"},
    "spec": {"spec": {"devices": {"requests": [b.exact("gpu")]}}},
}


def _allocated_claim(node: str) -> dict[str, Any]:
    claim = b.claim_doc([b.exact("gpu")], name="shared")
    claim["metadata"]["namespace"] = "ml"
    selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    claim["status"] = {
        "allocation": {"devices": {"results": [{"request": "gpu", "driver": NV, "pool": node, "device": "gpu-0"}]}, "nodeSelector": selector}
    }
    return claim


def test_pod_reusing_an_allocated_claim_goes_to_that_claims_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = _pod([{"name": "shared", "resourceClaimName": "shared"}, {"name": "fresh", "resourceClaimTemplateName": "one-gpu"}])
    path = write_yaml(tmp_path / "pod.yaml", class_docs() + [TEMPLATE, _allocated_claim("node-1"), pod])
    code, out, _ = explain(capsys, path, "--fleet", fleet_list(tmp_path, nodes(count=2, per_node=2)), "-o", "json")
    assert code == 0
    report = json.loads(out)
    assert report["node"] == "node-1"
    # gpu-0 on node-1 is the reused claim's; the new claim gets the other GPU there.
    assert report["allocations"]["ml/trainer-fresh"]["devices"]["results"][0]["device"] == "gpu-1"
    node_0 = next(n for n in report["nodes"] if n["node"] == "node-0")
    assert any("resourceclaim not available on the node" in r for r in node_0["reasons"])


def test_reused_claims_node_full_means_not_allocatable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = _pod([{"name": "shared", "resourceClaimName": "shared"}, {"name": "fresh", "resourceClaimTemplateName": "one-gpu"}])
    path = write_yaml(tmp_path / "pod.yaml", class_docs() + [TEMPLATE, _allocated_claim("node-1"), pod])
    code, out, _ = explain(capsys, path, "--fleet", fleet_list(tmp_path, nodes(count=2, per_node=1)))
    assert code == 1  # node-0 has a free GPU, but the pod must run on node-1 where the only GPU is taken
    assert "resourceclaim not available on the node" in out


def _namespace(labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml", "labels": labels}}


def _admin_claim() -> dict[str, Any]:
    claim = b.claim_doc([b.exact("gpu", adminAccess=True)], name="monitor")
    claim["metadata"]["namespace"] = "ml"
    return claim


def test_admin_access_needs_the_namespace_label(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = fleet_list(tmp_path, nodes())
    unlabelled = write_yaml(tmp_path / "a.yaml", class_docs() + [_namespace({}), _admin_claim()])
    code, _, err = explain(capsys, unlabelled, "--fleet", fleet)
    assert code == 2 and "resource.kubernetes.io/admin-access" in err and "requests[0].exactly.adminAccess" in err
    labelled = write_yaml(tmp_path / "b.yaml", class_docs() + [_namespace({"resource.kubernetes.io/admin-access": "true"}), _admin_claim()])
    code, out, _ = explain(capsys, labelled, "--fleet", fleet, "-o", "json")
    assert code == 0 and json.loads(out)["notes"] == []


def test_admin_access_in_a_namespace_explain_knows_nothing_about_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The API server refuses the claim in any namespace without the label; explain must not say ALLOCATABLE."""
    path = write_yaml(tmp_path / "a.yaml", class_docs() + [_admin_claim()])
    fleet = fleet_list(tmp_path, nodes())
    code, out, err = explain(capsys, path, "--fleet", fleet)
    assert code == 2 and "ALLOCATABLE" not in out
    assert "refuses to create this claim" in err and "requests[0].exactly.adminAccess" in err
    assert "--namespace-labels ml=resource.kubernetes.io/admin-access=true" in err  # how to tell explain otherwise
    code, out, _ = explain(capsys, path, "--fleet", fleet, "--namespace-labels", "ml=team=a,resource.kubernetes.io/admin-access=true", "-o", "json")
    assert code == 0 and json.loads(out)["notes"] == []
    code, _, err = explain(capsys, path, "--fleet", fleet, "--namespace-labels", "ml=resource.kubernetes.io/admin-access=false")
    assert code == 2 and "namespace 'ml' does not have it" in err
    code, _, _ = explain(capsys, path, "--fleet", fleet, "--feature-gates", "DRAAdminAccess=false")
    assert code == 0  # gate off: the API server drops the field, an ordinary request


def test_namespace_labels_flag_overrides_the_namespace_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_yaml(tmp_path / "a.yaml", class_docs() + [_namespace({}), _admin_claim()])
    code, _, _ = explain(capsys, path, "--fleet", fleet_list(tmp_path, nodes()), "--namespace-labels", "ml=resource.kubernetes.io/admin-access=true")
    assert code == 0


@pytest.mark.parametrize("entry", ["ml", "ML=a=b", "ml=novalue", "ml=bad key=x"])
def test_bad_namespace_labels_are_invalid_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], entry: str) -> None:
    path = write_yaml(tmp_path / "a.yaml", class_docs() + [_admin_claim()])
    code, _, err = explain(capsys, path, "--fleet", fleet_list(tmp_path, nodes()), "--namespace-labels", entry)
    assert code == 2 and "--namespace-labels" in err and repr(entry) in err


def _mig_claim(
    tmp_path: Path, count: int, device_class: str = "mig.nvidia.com", selector: str = 'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"'
) -> Path:
    request = {"name": "slices", "exactly": {"deviceClassName": device_class, "count": count, "selectors": [{"cel": {"expression": selector}}]}}
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "big", "namespace": "default"},
        "spec": {"devices": {"requests": [request]}},
    }
    return write_yaml(tmp_path / "claim.yaml", [claim])


def test_warns_where_the_scheduler_will_time_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """17 x 3g.40gb on dynamic MIG: 16 placements share counters; the scheduler tries 2^16 subsets."""
    code, out, _ = explain(capsys, _mig_claim(tmp_path, 17), "--profile", "dgx-h100", "--partitioning", "dynamic", "-o", "json")
    assert code == 1
    (warning,) = json.loads(out)["warnings"]
    assert "node-0" in warning and "65,536" in warning and "filter timeout" in warning


def test_no_warning_for_a_small_search(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = _mig_claim(tmp_path, 9, device_class="gpu.nvidia.com", selector="true")
    code, out, _ = explain(capsys, claim, "--profile", "dgx-h100", "-o", "json")
    assert code == 1 and json.loads(out)["warnings"] == []


def _gpu_class_with_extended_resource() -> dict[str, Any]:
    doc = b.class_doc(b.GPU_CLASS, b.CLASS_SELECTORS[b.GPU_CLASS])
    doc["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    return doc


def _extended_pod(count: int, claims: list[dict[str, str]] | None = None) -> dict[str, Any]:
    pod = _pod(claims or [])
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": count, "cpu": "2"}}
    return pod


def test_extended_resource_is_allocated_through_its_device_class(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_yaml(tmp_path / "pod.yaml", [_gpu_class_with_extended_resource(), _extended_pod(2)])
    fleet = fleet_list(tmp_path, nodes(count=2, per_node=2))
    code, out, _ = explain(capsys, path, "--fleet", fleet, "--feature-gates", "DRAExtendedResource=true", "-o", "json")
    assert code == 0
    (results,) = [a["devices"]["results"] for a in json.loads(out)["allocations"].values()]
    assert [r["device"] for r in results] == ["gpu-0", "gpu-1"]
    code, out, _ = explain(capsys, path, "--fleet", fleet, "-o", "json")  # gate off (the 1.35 default): a device plugin's job
    assert code == 1 and json.loads(out)["allocations"] == {}  # these nodes advertise no nvidia.com/gpu
    assert all(n["reasons"] == ["Insufficient nvidia.com/gpu"] for n in json.loads(out)["nodes"])
    assert any("must come from a device plugin (the DRAExtendedResource gate is off)" in note for note in json.loads(out)["notes"])


def _node_doc(name: str, fpgas: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "8", "example.com/fpga": str(fpgas)}},
    }


def test_extended_resource_no_class_maps_is_insufficient_like_the_scheduler(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Gate on, but no DeviceClass names nvidia.com/gpu (the file replaces the shipped class that did):
    NodeResourcesFit wants it in the node's allocatable, and a node running dra-driver has no such device plugin."""
    unmapping = b.class_doc("extended.gpu.nvidia.com", b.CLASS_SELECTORS[b.GPU_CLASS])
    path = write_yaml(tmp_path / "pod.yaml", class_docs() + [unmapping, _extended_pod(2)])
    code, out, _ = explain(capsys, path, "--fleet", fleet_list(tmp_path, nodes(count=2, per_node=2)), "--feature-gates", "DRAExtendedResource=true")
    assert code == 1 and "ALLOCATABLE on" not in out
    assert "2 nodes (e.g. node-0):" in out and "NOT ALLOCATABLE: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu." in out


def _fpga_pod() -> dict[str, Any]:
    pod = _pod([])
    pod["spec"]["containers"][0]["resources"] = {"limits": {"example.com/fpga": 2}}
    return pod


def test_other_device_plugin_resources_need_the_nodes_allocatable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_yaml(tmp_path / "pod.yaml", class_docs() + [_fpga_pod()])
    gates = ("--feature-gates", "DRAExtendedResource=true")
    # A node whose device plugin advertises enough takes the Pod; one with too few does not.
    fleet = fleet_list(tmp_path, nodes(count=2, per_node=2), [_node_doc("node-0", 1), _node_doc("node-1", 4)])
    code, out, _ = explain(capsys, path, "--fleet", fleet, *gates, "-o", "json")
    report = json.loads(out)
    assert code == 0 and report["node"] == "node-1"
    assert next(n for n in report["nodes"] if n["node"] == "node-0")["reasons"] == ["Insufficient example.com/fpga"]
    fleet = fleet_list(tmp_path, nodes(count=2, per_node=2), [_node_doc("node-0", 0), _node_doc("node-1", 0)])
    code, out, _ = explain(capsys, path, "--fleet", fleet, *gates)
    assert code == 1 and "NOT ALLOCATABLE: 0/2 nodes are available: 2 Insufficient example.com/fpga." in out


def test_other_device_plugin_resources_are_not_judged_without_node_objects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A simulated node says nothing about device plugins other than the accelerators dra-driver replaces."""
    path = write_yaml(tmp_path / "pod.yaml", class_docs() + [_fpga_pod()])
    code, out, _ = explain(capsys, path, "--fleet", fleet_list(tmp_path, nodes(count=2, per_node=2)), "-o", "json")
    assert code == 0
    assert any(n.startswith("example.com/fpga not checked: the fleet has no Node objects") for n in json.loads(out)["notes"])


def test_extended_resource_beside_a_claim_shares_the_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = _extended_pod(2, [{"name": "fresh", "resourceClaimTemplateName": "one-gpu"}])
    path = write_yaml(
        tmp_path / "pod.yaml", [_gpu_class_with_extended_resource(), b.class_doc(b.MIG_CLASS, b.CLASS_SELECTORS[b.MIG_CLASS]), TEMPLATE, pod]
    )
    gates = ("--feature-gates", "DRAExtendedResource=true")
    code, _, _ = explain(capsys, path, "--fleet", fleet_list(tmp_path, nodes(count=2, per_node=2)), *gates)
    assert code == 1  # three GPUs on one node: no node has them
    code, out, _ = explain(capsys, path, "--fleet", fleet_list(tmp_path, nodes(count=2, per_node=3)), *gates, "-o", "json")
    assert code == 0 and len(json.loads(out)["allocations"]) == 2


def _taint_rule(effect: str = "NoSchedule", **selector: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "maintenance"},
        "spec": {"deviceSelector": selector, "taint": {"key": "example.com/maintenance", "value": "true", "effect": effect}},
    }


def test_device_taint_rules_from_fleet_files_taint_their_devices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = write_yaml(tmp_path / "claim.yaml", class_docs() + [b.claim_doc([b.exact("gpu", count=2)])])
    fleet = fleet_list(tmp_path, nodes(count=1, per_node=2), [_taint_rule(driver=NV, pool="node-0", device="gpu-1")])
    code, out, _ = explain(capsys, claim, "--fleet", fleet, "--feature-gates", "DRADeviceTaintRules=true")
    assert code == 1 and "tainted example.com/maintenance=true:NoSchedule" in out
    code, out, _ = explain(capsys, claim, "--fleet", fleet, "-o", "json")  # gate off: the rule does nothing
    assert code == 0 and any("DRADeviceTaintRules gate is off" in n for n in json.loads(out)["notes"])


def test_device_taint_rule_in_the_input_file_and_its_validation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = fleet_list(tmp_path, nodes(count=1, per_node=2))
    gates = ("--feature-gates", "DRADeviceTaintRules=true")
    tolerated = b.exact("gpu", count=2, tolerations=[{"key": "example.com/maintenance", "operator": "Exists"}])
    claim = write_yaml(tmp_path / "claim.yaml", class_docs() + [b.claim_doc([tolerated]), _taint_rule(pool="node-0")])
    code, _, _ = explain(capsys, claim, "--fleet", fleet, *gates)
    assert code == 0  # tolerated
    bad = write_yaml(tmp_path / "bad.yaml", class_docs() + [b.claim_doc([b.exact("gpu")]), _taint_rule(effect="Sometimes")])
    code, _, err = explain(capsys, bad, "--fleet", fleet, *gates)
    assert code == 2 and "DeviceTaintRule maintenance.spec.taint.effect" in err


def _shared_gpu_fleet(tmp_path: Path, extra: list[dict[str, Any]] | None = None) -> Path:
    device = b.device("gpu-0", memory="80Gi")
    device["allowMultipleAllocations"] = True
    return fleet_list(tmp_path, [b.resource_slice("node-0", [device])], extra)


def _memory_request(name: str, amount: str) -> dict[str, Any]:
    return b.exact(name, capacity={"requests": {"memory": amount}})


def test_consumable_capacity_shares_one_device_between_requests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = write_yaml(tmp_path / "claim.yaml", class_docs() + [b.claim_doc([_memory_request("a", "40Gi"), _memory_request("b", "40Gi")])])
    gates = ("--feature-gates", "DRAConsumableCapacity=true")
    code, out, _ = explain(capsys, claim, "--fleet", _shared_gpu_fleet(tmp_path), *gates, "-o", "json")
    assert code == 0
    results = json.loads(out)["allocations"]["default/claim"]["devices"]["results"]
    assert [(r["device"], r["consumedCapacity"]) for r in results] == [("gpu-0", {"memory": "40Gi"}), ("gpu-0", {"memory": "40Gi"})]
    assert results[0]["shareID"] != results[1]["shareID"]
    code, _, _ = explain(capsys, claim, "--fleet", _shared_gpu_fleet(tmp_path))  # gate off: one device, two requests
    assert code == 1


def test_consumable_capacity_counts_other_claims_shares(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = b.claim_doc([_memory_request("a", "60Gi")], name="other")
    other["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "a", "driver": NV, "pool": "node-0", "device": "gpu-0", "shareID": "s1", "consumedCapacity": {"memory": "60Gi"}}
                ]
            }
        }
    }
    claim = write_yaml(tmp_path / "claim.yaml", class_docs() + [b.claim_doc([_memory_request("a", "40Gi")])])
    code, out, _ = explain(capsys, claim, "--fleet", _shared_gpu_fleet(tmp_path, [other]), "--feature-gates", "DRAConsumableCapacity=true")
    assert code == 1 and "capacity gpu.nvidia.com/memory" in out
    small = write_yaml(tmp_path / "small.yaml", class_docs() + [b.claim_doc([_memory_request("a", "20Gi")])])
    code, _, _ = explain(capsys, small, "--fleet", _shared_gpu_fleet(tmp_path, [other]), "--feature-gates", "DRAConsumableCapacity=true")
    assert code == 0


def test_capacity_request_larger_than_any_device_rules_it_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = write_yaml(tmp_path / "claim.yaml", class_docs() + [b.claim_doc([_memory_request("a", "100Gi")])])
    code, out, _ = explain(
        capsys, claim, "--fleet", fleet_list(tmp_path, nodes(count=1, per_node=1)), "--feature-gates", "DRAConsumableCapacity=true"
    )
    assert code == 1 and "requested capacity does not fit" in out


def _zoned_nodes() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{n}", "labels": {"kubernetes.io/hostname": f"node-{n}", "zone": zone}}}
        for n, zone in enumerate("ab")
    ]


@pytest.mark.parametrize(
    "constraint",
    [
        {"nodeSelector": {"zone": "b"}},
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}]
                    }
                }
            }
        },
        {"nodeName": "node-1"},
    ],
    ids=["nodeSelector", "required-affinity", "nodeName"],
)
def test_pods_own_node_constraints_filter_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str], constraint: dict[str, Any]) -> None:
    pod = _pod([{"name": "fresh", "resourceClaimTemplateName": "one-gpu"}])
    pod["spec"].update(constraint)
    path = write_yaml(tmp_path / "pod.yaml", class_docs() + [TEMPLATE, pod])
    code, out, _ = explain(capsys, path, "--fleet", fleet_list(tmp_path, nodes(count=2, per_node=1), _zoned_nodes()), "-o", "json")
    report = json.loads(out)
    assert code == 0 and report["node"] == "node-1"
    (node_0,) = [n for n in report["nodes"] if n["node"] == "node-0"]
    assert node_0["reasons"] == [
        "node(s) didn't match the requested node name" if "nodeName" in constraint else "node(s) didn't match Pod's node affinity/selector"
    ]


def test_pod_node_constraints_need_known_node_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Simulated nodes carry only their hostname: a selector on other labels is not judged, and a note says so."""
    pod = _pod([{"name": "fresh", "resourceClaimTemplateName": "one-gpu"}])
    pod["spec"]["nodeSelector"] = {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    path = write_yaml(tmp_path / "pod.yaml", class_docs() + [TEMPLATE, pod])
    code, out, _ = explain(capsys, path, "--fleet", fleet_list(tmp_path, nodes(count=2, per_node=1)), "-o", "json")
    assert code == 0 and any("node selector / affinity of 1 pod(s) not checked (ml/trainer)" in n for n in json.loads(out)["notes"])
    code, _, _ = explain(capsys, path, "--fleet", fleet_list(tmp_path, nodes(count=2, per_node=1), _zoned_nodes()))
    assert code == 1  # with the Node objects known, no node has the instance type


def test_node_name_is_checked_without_node_objects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pod = _pod([{"name": "fresh", "resourceClaimTemplateName": "one-gpu"}])
    pod["spec"]["nodeName"] = "node-1"
    path = write_yaml(tmp_path / "pod.yaml", class_docs() + [TEMPLATE, pod])
    code, out, _ = explain(capsys, path, "--fleet", fleet_list(tmp_path, nodes(count=2, per_node=1)), "-o", "json")
    assert code == 0 and json.loads(out)["node"] == "node-1" and json.loads(out)["notes"] == []


def test_pods_use_templates_of_their_own_namespace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two namespaces each have a template 'one-gpu'; the pod in 'ml' gets ml's (two GPUs), not the other's."""
    other = {**TEMPLATE, "metadata": {"name": "one-gpu", "namespace": "other"}}
    two = {**TEMPLATE, "spec": {"spec": {"devices": {"requests": [b.exact("gpu", count=2)]}}}}
    pod = _pod([{"name": "fresh", "resourceClaimTemplateName": "one-gpu"}])
    code, out, _ = explain(
        capsys, write_yaml(tmp_path / "pod.yaml", class_docs() + [two, other, pod]), "--fleet", fleet_list(tmp_path, nodes()), "-o", "json"
    )
    assert code == 0 and len(json.loads(out)["allocations"]["ml/trainer-fresh"]["devices"]["results"]) == 2
    code, _, err = explain(capsys, write_yaml(tmp_path / "pod.yaml", class_docs() + [other, pod]), "--fleet", fleet_list(tmp_path, nodes()))
    assert code == 2 and "ResourceClaimTemplate 'one-gpu' of namespace 'ml' is not in the file" in err
