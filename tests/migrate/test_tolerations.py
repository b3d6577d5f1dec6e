"""A migrated pod keeps the tolerations ExtendedResourceToleration gave it for the resources it no longer requests."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.cli.main import main
from migrate_testlib import by_kind, is_toleration_note, run
from dra_driver.migrate import Action

DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: serve
spec:
  template:
    spec:
      containers:
      - name: a
        image: x
        resources:
          limits:
            nvidia.com/gpu: 1
            nvidia.com/mig-1g.10gb: 1
      - name: b
        image: x
        resources:
          limits:
            nvidia.com/gpu: 2
"""


def _tolerations(text: str) -> list[dict[str, str]]:
    [deployment] = by_kind(text, "Deployment")
    return deployment["spec"]["template"]["spec"].get("tolerations") or []


def test_each_converted_resource_gets_the_admission_toleration_once_and_a_note() -> None:
    result, report = run(DEPLOYMENT)
    assert _tolerations(result.output) == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "nvidia.com/mig-1g.10gb", "operator": "Exists", "effect": "NoSchedule"},
    ]
    notes = [f for f in report.by_action(Action.NOTE) if is_toleration_note(f)]
    assert [f.subject for f in notes] == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]
    assert notes[0].where.path == "spec.template.spec.tolerations" and "--no-tolerations" in notes[0].reason


def test_existing_tolerations_are_kept_and_a_covering_one_is_not_doubled() -> None:
    text = DEPLOYMENT.replace("      containers:\n", (
        "      tolerations:\n"
        "      - key: dedicated\n        operator: Equal\n        value: ml\n        effect: NoSchedule\n"
        "      - key: nvidia.com/gpu\n        operator: Exists\n"  # any effect: covers NoSchedule
        "      containers:\n"), 1)
    result, report = run(text)
    assert _tolerations(result.output) == [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Exists"},
        {"key": "nvidia.com/mig-1g.10gb", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert [f.subject for f in report.by_action(Action.NOTE) if is_toleration_note(f)] == ["nvidia.com/mig-1g.10gb"]
    # only the tolerations block gained lines: the existing entries are untouched text
    assert "      - key: dedicated\n        operator: Equal\n        value: ml\n" in result.output


def test_an_equal_toleration_with_a_value_does_not_count_as_covering() -> None:
    text = DEPLOYMENT.replace("      containers:\n", (
        "      tolerations:\n      - {key: nvidia.com/gpu, operator: Equal, value: present, effect: NoSchedule}\n"
        "      containers:\n"), 1)
    result, _ = run(text)
    keys = [(t["key"], t["operator"]) for t in _tolerations(result.output)]
    assert ("nvidia.com/gpu", "Exists") in keys and ("nvidia.com/gpu", "Equal") in keys


def test_running_again_adds_nothing() -> None:
    first, _ = run(DEPLOYMENT)
    again, report = run(first.output)
    assert again.output == first.output
    assert not [f for f in report.by_action(Action.NOTE) if is_toleration_note(f)]


def test_no_tolerations_flag_leaves_them_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "d.yaml"
    manifest.write_text(DEPLOYMENT)
    assert main(["migrate", "--no-tolerations", str(manifest)]) == 0
    out, err = capsys.readouterr()
    assert _tolerations(out) == [] and "added toleration" not in err
    assert main(["migrate", str(manifest)]) == 0
    assert len(_tolerations(capsys.readouterr().out)) == 2


def test_tolerations_shared_through_an_alias_are_copied_before_adding() -> None:
    text = """apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: cpu}
  spec:
    tolerations: &tol
    - {key: dedicated, operator: Exists}
    containers: [{name: c, image: x}]
- apiVersion: v1
  kind: Pod
  metadata: {name: gpu}
  spec:
    tolerations: *tol
    containers:
    - name: c
      image: x
      resources: {limits: {amd.com/gpu: 1}}
"""
    result, _ = run(text)
    pods = {p["metadata"]["name"]: p for p in by_kind(result.output, "Pod")}
    assert pods["cpu"]["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert pods["gpu"]["spec"]["tolerations"][-1] == {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
