"""explain on inputs in shapes it does not take as they are: a v1beta1 request, kinds it does not place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from explain_testlib import explain

from dra_driver.cli.main import main

V1BETA1_CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: old-shape
spec:
  devices:
    requests:
    - name: gpu
      deviceClassName: gpu.nvidia.com
      count: 2
"""


def test_v1beta1_request_fields_say_move_under_exactly_at_their_own_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "claim.yaml"
    path.write_text("# a claim written for resource.k8s.io/v1beta1\n" + V1BETA1_CLAIM)
    code, out, err = explain(capsys, path, "--profile", "dgx-h100")
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert f"{path}:10: ResourceClaim old-shape.spec.devices.requests[0].deviceClassName:" in lines[0]
    assert f"{path}:11: ResourceClaim old-shape.spec.devices.requests[0].count:" in lines[1]
    assert all("move it under `exactly:`" in line and "remove it" not in line for line in lines)


def test_v1beta1_fields_in_a_list_item_name_their_line_and_other_unknown_fields_say_remove(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: settings\n"
        "- apiVersion: resource.k8s.io/v1\n  kind: ResourceClaim\n  metadata:\n    name: old-shape\n"
        "  spec:\n    devices:\n      requests:\n      - name: gpu\n"
        "        deviceClassName: gpu.nvidia.com\n        count: 2\n        colour: red\n"
    )
    path = tmp_path / "list.yaml"
    path.write_text(text)
    code, _, err = explain(capsys, path, "--profile", "dgx-h100")
    assert code == 2
    numbered = {number: line for number, line in enumerate(text.splitlines(), start=1)}
    by_field = {line.split(".spec.devices.requests[0].")[1].split(":")[0]: line for line in err.splitlines() if ".spec.devices." in line}
    for field, fix in (("deviceClassName", "move it under `exactly:`"), ("count", "move it under `exactly:`"), ("colour", "remove it")):
        line = by_field[field]
        number = int(line.split(f"{path}:")[1].split(":")[0])
        assert numbered[number].strip().startswith(field + ":") and fix in line, (field, line)


NIM_SERVICE = {
    "apiVersion": "apps.nvidia.com/v1alpha1",
    "kind": "NIMService",
    "metadata": {"name": "llama", "namespace": "nim"},
    "spec": {
        "image": {"repository": "nvcr.io/nim/meta/llama3-8b-instruct", "tag": "1.0.0"},
        "replicas": 2,
        "resources": {"limits": {"nvidia.com/gpu": 2}},
    },
}


def test_migrated_nimservice_pods_get_the_claims_of_dra_resources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "nim.yaml"
    source.write_text(yaml.safe_dump(NIM_SERVICE))
    assert main(["migrate", str(source)]) == 0
    migrated = tmp_path / "migrated.yaml"
    migrated.write_text(capsys.readouterr().out)
    assert "draResources" in migrated.read_text()
    code, out, err = explain(capsys, migrated, "--profile", "dgx-h100", "-o", "json")
    assert code == 0, err
    report = json.loads(out)
    assert [pod["pod"] for pod in report["pods"]] == [
        "Pod nim/llama-0 (NIMService nim/llama, replica 1 of 2)",
        "Pod nim/llama-1 (NIMService nim/llama, replica 2 of 2)",
    ]
    devices = [r["device"] for pod in report["pods"] for allocation in pod["allocations"].values() for r in allocation["devices"]["results"]]
    assert len(devices) == 4 and len(set(devices)) == 4  # 2 replicas x 2 GPUs, none given twice
    assert not any("ask for no devices" in note for note in report["notes"])


COMPUTE_DOMAIN = """apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata:
  name: imex
spec:
  numNodes: 1
  channel:
    resourceClaimTemplate:
      name: imex-channel
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: gpus
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
---
apiVersion: v1
kind: Pod
metadata:
  name: trainer
spec:
  containers:
  - name: c
    image: x
    resources:
      claims:
      - name: gpu
  resourceClaims:
  - name: gpu
    resourceClaimTemplateName: gpus
"""


def test_custom_kinds_are_skipped_with_one_note_per_kind_and_typos_of_explains_kinds_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sample.yaml"
    path.write_text(COMPUTE_DOMAIN + "---\n" + COMPUTE_DOMAIN.split("---")[0].replace("name: imex\n", "name: imex-2\n"))
    code, out, err = explain(capsys, path, "--profile", "dgx-h100")
    assert code == 0, err
    assert out.count("Note: skipped 2 ComputeDomain: explain places only ResourceClaims, ResourceClaimTemplates, Pods and workloads\n") == 1
    assert "ALLOCATABLE" in out
    path.write_text(COMPUTE_DOMAIN.replace("kind: ResourceClaimTemplate", "kind: ResourceClaimTemplte"))
    code, out, err = explain(capsys, path, "--profile", "dgx-h100")
    assert code == 2 and "'ResourceClaimTemplte' is not a kind explain reads; did you mean 'ResourceClaimTemplate'?" in err


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


MIG_CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: small
spec:
  devices:
    requests:
    - name: mig
      exactly:
        deviceClassName: mig-1g.10gb.nvidia.com
"""


def test_a_mig_claim_on_a_static_profile_hints_at_dynamic_partitioning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = _write(tmp_path, "mig.yaml", MIG_CLAIM)
    code, out, _ = explain(capsys, claim, "--profile", "dgx-h100")
    assert code == 1 and "NOT ALLOCATABLE" in out
    assert "Note: with --partitioning dynamic (nodes running `dra-driver run --partitioning dynamic`" in out
    assert "56 devices of profile dgx-h100 match and it is allocatable" in out
    code, out, _ = explain(capsys, claim, "--profile", "dgx-h100", "--partitioning", "dynamic")
    assert code == 0 and "--partitioning dynamic (nodes" not in out
    code, out, _ = explain(
        capsys, _write(tmp_path, "big.yaml", MIG_CLAIM.replace("mig-1g.10gb.nvidia.com", "gpu.nvidia.com\n        count: 9")), "--profile", "dgx-h100"
    )
    assert code == 1 and "--partitioning dynamic (nodes" not in out  # no better there: no hint


def test_a_constraint_on_an_attribute_no_device_has_gets_one_note_with_a_did_you_mean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = MIG_CLAIM.replace("mig-1g.10gb.nvidia.com", "gpu.nvidia.com\n        count: 2") + "    constraints:\n    - matchAttribute: {}\n"
    code, out, _ = explain(capsys, _write(tmp_path, "c.yaml", text.format("dra-driver.io/interconectDomain")), "--profile", "dgx-h100")
    assert code == 1
    (note,) = [line for line in out.splitlines() if line.startswith("Note:")]
    assert (
        "constraints[0].matchAttribute: no device of this fleet has dra-driver.io/interconectDomain; did you mean 'dra-driver.io/interconnectDomain'?"
        in note
    )
    code, out, _ = explain(capsys, _write(tmp_path, "c.yaml", text.format("gpu.nvidia.com/nvlinkDomain")), "--profile", "dgx-h100")
    (note,) = [line for line in out.splitlines() if line.startswith("Note:")]
    assert "no device of this fleet has gpu.nvidia.com/nvlinkDomain" in note and "kept together by dra-driver.io/interconnectDomain" in note
    code, out, _ = explain(capsys, _write(tmp_path, "c.yaml", text.format("dra-driver.io/interconnectDomain")), "--profile", "dgx-h100")
    assert code == 0 and "Note:" not in out


def test_template_says_which_fallback_fits_no_shipped_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["template", "--count", "4", "--model", "H100", "--fallback", "8xA100"]) == 0
    err = capsys.readouterr().err
    assert "choice 2, 8 x nvidia A100, fits no shipped hardware profile" in err and "at most 4 on one node, 8 wanted" in err
    assert "choice 1" not in err
    assert main(["template", "--count", "4", "--model", "H100", "--fallback", "4xA100"]) == 0
    assert "fits no shipped hardware profile" not in capsys.readouterr().err


TYPO_CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: typo
  creationTimestamp: "2026-01-01T00:00:00Z"
  managedFields: []
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
        allocationMode: ExactCount
    constraints:
    - requests: [gpu]
      matchAtribute: resource.kubernetes.io/pcieRoot
status:
  addedByANewerServer: {}
"""


def test_an_unknown_field_is_named_with_its_path_line_and_fix_but_metadata_and_status_are_not_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user's file is read strictly (model/api_base.py) except where the API server writes: metadata and status."""
    path = tmp_path / "claim.yaml"
    path.write_text(TYPO_CLAIM)
    code, out, err = explain(capsys, path, "--profile", "dgx-h100")
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"dra-driver explain: error: {path}:16: ResourceClaim typo.spec.devices.constraints[0].matchAtribute: "
        "unknown field; remove it (check spelling and the resource.k8s.io/v1 schema)"
    ]
    path.write_text(TYPO_CLAIM.replace("matchAtribute", "matchAttribute"))
    code, _, err = explain(capsys, path, "--profile", "dgx-h100")
    assert code == 0, err
