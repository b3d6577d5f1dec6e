"""`dra-driver explain` end to end: files in, exit code and report out (real CEL, real allocator)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import alloc_builders as b
import pytest

from explain_testlib import NV, class_docs, claim_file, explain, fleet_list, nodes, write_yaml


def test_allocatable_claim_exits_0_with_status_allocation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = explain(capsys, claim_file(tmp_path, [b.exact("gpu", count=2)]), "--fleet", fleet_list(tmp_path, nodes()), "-o", "json")
    assert code == 0
    report = json.loads(out)
    assert report["allocatable"] and report["node"] == "node-0"
    results = report["allocations"]["default/claim"]["devices"]["results"]
    assert [(r["request"], r["pool"], r["device"]) for r in results] == [("gpu", "node-0", "gpu-0"), ("gpu", "node-0", "gpu-1")]


def test_text_report_shows_allocation_and_reasons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slices = [b.resource_slice("node-0", [b.device("gpu-0"), b.device("mig-0", type_="mig")])]
    code, out, _ = explain(capsys, claim_file(tmp_path, [b.exact("gpu")]), "--fleet", fleet_list(tmp_path, slices))
    assert code == 0
    assert "ALLOCATABLE on node-0" in out and "device: gpu-0" in out
    assert "class gpu.nvidia.com selector #0 is false" in out and "node-0/mig-0" in out


def test_not_allocatable_exits_1_with_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = explain(capsys, claim_file(tmp_path, [b.exact("gpu", count=3)]), "--fleet", fleet_list(tmp_path, nodes()))
    assert code == 1
    assert "NOT ALLOCATABLE" in out and "gpu needs 3, 2 usable" in out


def test_cel_runtime_error_exits_1_and_shows_the_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    selector = f'device.attributes["{NV}"].missing == "x"'
    code, out, _ = explain(
        capsys, claim_file(tmp_path, [b.exact("gpu", selectors=(selector,))]), "--fleet", fleet_list(tmp_path, nodes()), "-o", "json"
    )
    assert code == 1
    report = json.loads(out)
    assert not report["allocatable"] and "CEL runtime error" in report["error"] and "selector #0" in report["error"]


@pytest.mark.parametrize(
    ("request_body", "constraints", "field", "words"),
    [
        (b.exact("gpu", count=0), None, "requests[0].exactly.count", "greater than zero"),
        ({"name": "gpu", "exactly": {"deviceClassName": b.GPU_CLASS, "allocationMode": "All", "count": 2}}, None, "requests[0].exactly.count", "All"),
        (
            {"name": "gpu", "exactly": {"deviceClassName": b.GPU_CLASS, "allocationMode": "Some"}},
            None,
            "requests[0].exactly.allocationMode",
            "ExactCount or All",
        ),
        (b.exact("gpu", device_class="nope.example.com"), None, "requests[0].exactly.deviceClassName", "does not exist"),
        (
            b.exact("gpu", selectors=("device.attributes[",)),
            None,
            "requests[0].exactly.selectors[0].cel.expression",
            'Invalid value: "device.attributes[": Syntax error',
        ),
        (b.exact("gpu", selectors=("true || " * 1300 + "true",)), None, "requests[0].exactly.selectors[0].cel.expression", "10240"),
        (b.exact("GPU"), None, "requests[0].name", "DNS label"),
        ({"name": "gpu"}, None, "requests[0]", "exactly one of exactly or firstAvailable"),
        ({"name": "gpu", "firstAvailable": [b.sub(f"s{i}", b.GPU_CLASS) for i in range(9)]}, None, "requests[0].firstAvailable", "between 1 and 8"),
        (b.exact("gpu"), [{"matchAttribute": "clique"}], "constraints[0].matchAttribute", "fully qualified"),
        (b.exact("gpu"), [{"requests": ["other"], "matchAttribute": f"{NV}/clique"}], "constraints[0].requests[0]", "not a request"),
        ({"name": "gpu", "exactly": {"deviceClassName": b.GPU_CLASS, "colour": "red"}}, None, "requests[0].exactly.colour", "unknown field"),
    ],
)
def test_invalid_claims_exit_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], request_body: dict, constraints: list | None, field: str, words: str
) -> None:
    code, _, err = explain(capsys, claim_file(tmp_path, [request_body], constraints), "--fleet", fleet_list(tmp_path, nodes()))
    assert code == 2
    assert field in err and words in err


def test_limits_on_counts_and_opaque_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    requests = [b.exact(f"r{i}") for i in range(33)]
    big = {"driver": NV, "parameters": {"apiVersion": "x/v1", "kind": "GpuConfig", "blob": "x" * 10300}}
    doc = b.claim_doc(requests, config=[{"opaque": big}, {"opaque": {"driver": NV, "parameters": ["not", "an", "object"]}}])
    doc["spec"]["devices"]["requests"].append(b.exact("r0"))
    code, _, err = explain(capsys, write_yaml(tmp_path / "c.yaml", class_docs() + [doc]), "--fleet", fleet_list(tmp_path, nodes()))
    assert code == 2
    assert "spec.devices.requests: has 34 requests; at most 32" in err
    assert "duplicate request name 'r0'" in err
    assert "config[0].opaque.parameters: is" in err and "10240" in err
    assert "config[1].opaque.parameters: must be a JSON object" in err


def test_pod_with_templates_allocates_all_its_claims_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": [b.exact("gpu")]}}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": "a", "resourceClaimTemplateName": "one-gpu"}, {"name": "b", "resourceClaimTemplateName": "one-gpu"}],
        },
    }
    path = write_yaml(tmp_path / "pod.yaml", class_docs() + [template, pod])
    code, out, _ = explain(capsys, path, "--fleet", fleet_list(tmp_path, nodes(per_node=2)), "-o", "json")
    assert code == 0
    allocations = json.loads(out)["allocations"]
    assert allocations["ml/trainer-a"]["devices"]["results"][0]["device"] == "gpu-0"
    assert allocations["ml/trainer-b"]["devices"]["results"][0]["device"] == "gpu-1"
    missing = write_yaml(tmp_path / "pod2.yaml", class_docs() + [pod])
    code, _, err = explain(capsys, missing, "--fleet", fleet_list(tmp_path, nodes()))
    assert code == 2 and "resourceClaims[0].resourceClaimTemplateName" in err


def test_claims_in_the_fleet_hold_their_devices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = b.claim_doc([b.exact("gpu")], name="other")
    other["status"] = {"allocation": {"devices": {"results": [{"request": "gpu", "driver": NV, "pool": "node-0", "device": "gpu-0"}]}}}
    fleet = fleet_list(tmp_path, nodes(count=1, per_node=1), [other])
    code, out, _ = explain(capsys, claim_file(tmp_path, [b.exact("gpu")]), "--fleet", fleet)
    assert code == 1
    assert "allocated to another claim" in out and "held by default/other" in out


def test_fleet_from_multidoc_yaml_and_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "fleet"
    directory.mkdir()
    write_yaml(directory / "a.yaml", nodes(count=1))
    write_yaml(directory / "b.yml", [b.resource_slice("node-9", [b.device("gpu-0"), b.device("gpu-1"), b.device("gpu-2")])])
    claim = claim_file(tmp_path, [b.exact("gpu", count=3)])
    code, out, _ = explain(capsys, claim, "--fleet", directory, "-o", "json")
    assert code == 0 and json.loads(out)["node"] == "node-9"
    code, out, _ = explain(capsys, claim, "--fleet", directory / "a.yaml", "--fleet", directory / "b.yml", "-o", "json")
    assert code == 0 and json.loads(out)["fleet"]["devices"] == 5


def test_bad_fleet_exits_2_naming_slice_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = b.resource_slice("node-0", [b.device("GPU_0")], name="broken")
    code, _, err = explain(capsys, claim_file(tmp_path, [b.exact("gpu")]), "--fleet", fleet_list(tmp_path, [broken]))
    assert code == 2 and "ResourceSlice broken" in err and "name" in err
    code, _, err = explain(capsys, claim_file(tmp_path, [b.exact("gpu")]), "--fleet", tmp_path / "nope.yaml")
    assert code == 2 and "does not exist" in err


def test_user_class_replaces_shipped_class_of_same_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slices = [b.resource_slice("node-0", [b.device("mig-0", type_="mig")])]
    claim = write_yaml(tmp_path / "claim.yaml", [b.claim_doc([b.exact("gpu")])])
    classes = write_yaml(tmp_path / "classes.yaml", [b.class_doc(b.GPU_CLASS, [f'device.driver == "{NV}"'])])
    code, out, _ = explain(capsys, claim, "--fleet", fleet_list(tmp_path, slices), "--classes", classes, "-o", "json")
    assert code == 0 and json.loads(out)["allocations"]["default/claim"]["devices"]["results"][0]["device"] == "mig-0"


def test_text_output_stays_short_on_a_large_fleet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    many = [b.resource_slice(f"node-{n:03d}", [b.device(f"gpu-{i}", type_="mig" if i % 2 else "gpu") for i in range(8)]) for n in range(150)]
    code, out, _ = explain(capsys, claim_file(tmp_path, [b.exact("gpu", count=5)]), "--fleet", fleet_list(tmp_path, many))
    assert code == 1
    assert len(out.splitlines()) < 40
    assert "600 x class gpu.nvidia.com selector #0 is false" in out
    code, out, _ = explain(capsys, claim_file(tmp_path, [b.exact("gpu", count=5)]), "--fleet", fleet_list(tmp_path, many), "--verbose")
    assert "node-149" in out


def test_at_most_one_fleet_source_and_none_without_a_cluster_says_what_to_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = explain(capsys, claim_file(tmp_path, [b.exact("gpu")]))
    assert code == 2 and "pass --fleet FILE, --profile NAME, or --kubeconfig FILE [--context NAME]" in err
    code, _, err = explain(capsys, claim_file(tmp_path, [b.exact("gpu")]), "--profile", "l4", "--context", "x")
    assert code == 2 and "give one of --fleet, --profile, --kubeconfig/--context (got --profile, --kubeconfig/--context)" in err


def test_output_is_deterministic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = (claim_file(tmp_path, [b.exact("gpu", count=2)]), "--fleet", fleet_list(tmp_path, nodes(count=5)), "-o", "json")
    first = explain(capsys, *argv)
    second = explain(capsys, *argv)
    assert first == second


def test_the_loaded_fleet_is_frozen_during_the_command_and_unfrozen_after(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    from dra_driver.sources import fleet as fleets

    seen: list[int] = []
    check = fleets.check_slices

    def recording_check(slices: Any) -> None:  # runs right after the fleet file was read
        seen.append(gc.get_freeze_count())
        check(slices)

    monkeypatch.setattr(fleets, "check_slices", recording_check)
    code, out, _ = explain(capsys, claim_file(tmp_path, [b.exact("gpu", count=2)]), "--fleet", fleet_list(tmp_path, nodes()), "-o", "json")
    assert code == 0 and json.loads(out)["node"] == "node-0"  # the same answer as without freezing
    assert seen and seen[0] > 0  # the parsed fleet left the collector's generations
    assert gc.isenabled() and gc.get_freeze_count() == 0
