"""`nvidia.com/gpu` on MIG single-strategy and time-sliced nodes: never silently a whole, exclusive GPU."""

from __future__ import annotations

import pytest

from migrate_testlib import by_kind, run
from dra_driver.migrate import Action

POD = """apiVersion: v1
kind: Pod
metadata:
  name: p
spec:
{placement}
  containers:
  - name: c
    image: cuda
    resources:
      limits:
        nvidia.com/gpu: 2
"""


def _pod(placement: str) -> str:
    return POD.format(placement=placement)


def _requests(text: str) -> list[dict]:
    [template] = by_kind(text, "ResourceClaimTemplate")
    return [r["exactly"] for r in template["spec"]["spec"]["devices"]["requests"]]


@pytest.mark.parametrize("placement", [
    "  nodeSelector:\n    nvidia.com/gpu.product: A100-SXM4-40GB-MIG-1g.5gb",
    "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n"
    "        - matchExpressions:\n          - {key: nvidia.com/gpu.product, operator: In, values: [A100-SXM4-40GB-MIG-1g.5gb]}",
])
def test_mig_single_strategy_label_makes_the_request_a_mig_device(placement: str) -> None:
    result, report = run(_pod(placement))
    assert _requests(result.output) == [{"deviceClassName": "mig-1g.5gb.nvidia.com", "count": 2}]
    assert "A100-SXM4-40GB-MIG-1g.5gb" in result.output.split("---\n")[-1]  # the node label stays in the placement
    assert any("MIG single-strategy" in f.reason for f in report.by_action(Action.NOTE))


def test_plain_product_label_is_still_a_whole_gpu() -> None:
    result, _ = run(_pod("  nodeSelector:\n    nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB"))
    assert _requests(result.output)[0]["deviceClassName"] == "gpu.nvidia.com"


@pytest.mark.parametrize("placement", [
    "  nodeSelector:\n    nvidia.com/gpu.product: Tesla-T4-SHARED",
    "  nodeSelector:\n    nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB-SHARED",
])
def test_time_sliced_label_is_never_made_exclusive(placement: str) -> None:
    text = _pod(placement)
    result, report = run(text)
    assert result.output == text
    [finding] = [f for f in report.by_action(Action.NOT_CONVERTED) if f.subject == "nvidia.com/gpu"]
    assert "time-sliced" in finding.reason and "TimeSlicing" in finding.reason


@pytest.mark.parametrize("placement", [
    "  nodeSelector:\n    nvidia.com/mig.strategy: single",
    "  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n"
    "        - matchExpressions:\n          - {key: nvidia.com/gpu.product, operator: In, "
    "values: [A100-SXM4-40GB-MIG-1g.5gb, A100-SXM4-40GB-MIG-2g.10gb]}",
])
def test_mig_single_strategy_without_one_profile_is_not_converted(placement: str) -> None:
    text = _pod(placement)
    result, report = run(text)
    assert result.output == text
    assert any("MIG single-strategy" in f.reason for f in report.by_action(Action.NOT_CONVERTED))


def test_extended_resource_strategy_reports_such_pods() -> None:
    _, report = run(_pod("  nodeSelector:\n    nvidia.com/gpu.product: Tesla-T4-SHARED"), strategy="extended-resource")
    assert any("whole, exclusive GPU" in f.reason for f in report.by_action(Action.NOT_CONVERTED))
