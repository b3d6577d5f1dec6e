"""Findings on real manifests say what each thing is, once, at a path that reads right (issue 33, migrate messages)."""

from __future__ import annotations

import pytest

from migrate_testlib import run
from dra_driver.migrate import Action

LIST = """apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata:
    name: p
    annotations:
      nvidia.com/sharing: time-slicing
  spec:
    containers:
    - name: c
      image: x
      resources:
        limits:
          nvidia.com/gpu: 1
"""


def _pod(limits: str, requests: str | None = None) -> str:
    text = ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: x\n"
            f"    resources:\n      limits:\n        nvidia.com/gpu: {limits}\n")
    return text + (f"      requests:\n        nvidia.com/gpu: {requests}\n" if requests is not None else "")


def test_a_pod_annotation_is_reported_once_and_a_list_path_has_no_double_dot() -> None:
    _, report = run(LIST)
    annotations = [f for f in report.findings if f.subject == "nvidia.com/sharing"]
    assert [f.where.path for f in annotations] == ["items[0].metadata.annotations"]
    assert not [f for f in report.findings if ".." in f.where.path]


def test_a_deployment_reports_its_own_and_its_pod_template_annotations() -> None:
    text = ("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n  annotations:\n    nvidia.com/a: x\n"
            "spec:\n  template:\n    metadata:\n      annotations:\n        nvidia.com/b: y\n    spec:\n"
            "      containers:\n      - name: c\n        image: x\n")
    _, report = run(text)
    assert [(f.where.path, f.subject) for f in report.by_action(Action.NOT_CONVERTED)] == [
        ("metadata.annotations", "nvidia.com/a"), ("spec.template.metadata.annotations", "nvidia.com/b")]


@pytest.mark.parametrize("value", ["null", "~", ""])
def test_a_null_count_is_zero_as_kubernetes_reads_it(value: str) -> None:
    text = _pod(value)
    result, report = run(text)
    assert result.output == text
    [finding] = report.by_action(Action.NOT_CONVERTED)
    assert "count 0 (null, which Kubernetes reads as 0) asks for no device" in finding.reason
    assert "None" not in finding.reason and not report.remaining


@pytest.mark.parametrize(("value", "what"), [
    ("$GPU_PER_NODE", "environment-variable reference"),
    ("${GPUS}", "environment-variable reference"),
    ("$$GPU_PER_WORKER", "environment-variable reference"),
    ("$(GPUS)", "variable reference"),
    ("PLACEHOLDER_NUM_GPU", "placeholder name"),
    ("<num-gpus>", "placeholder name"),
    ("__GPUS__", "placeholder name"),
])
def test_placeholder_counts_are_named_as_such_once_for_limits_and_requests(value: str, what: str) -> None:
    text = _pod(f'"{value}"', f'"{value}"')
    result, report = run(text)
    assert result.output == text
    [finding] = report.findings  # requests is the same entry: not "named outside the containers' resources"
    assert finding.where.path == "spec.containers[0].resources" and finding.remains
    assert what in finding.reason and "substitute it" in finding.reason


def test_a_fraction_is_not_a_placeholder() -> None:
    [finding] = run(_pod("500m"))[1].findings
    assert "not a whole number of devices" in finding.reason and "placeholder" not in finding.reason


def test_a_zero_count_in_limits_and_requests_is_reported_once() -> None:
    _, report = run(_pod("0", "0"))
    assert [(f.where.path, f.remains) for f in report.findings] == [("spec.containers[0].resources", False)]
