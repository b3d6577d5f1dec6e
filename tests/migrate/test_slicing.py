"""GPU slicing schemes (HAMi) are never turned into exclusive whole GPUs: left as they are and reported."""

from __future__ import annotations

import pytest

from migrate_testlib import by_kind, device_plugin_requests, run
from dra_driver.migrate import Action

POD = """apiVersion: v1
kind: Pod
metadata:
  name: sliced
spec:
  containers:
  - name: infer
    image: x
    resources:
      limits:
        nvidia.com/gpu: 1
        {slice}: {amount}
  - name: whole
    image: x
    resources:
      limits:
        nvidia.com/gpu: 1
"""


@pytest.mark.parametrize(("resource", "amount"), [
    ("nvidia.com/gpumem", 3000), ("nvidia.com/gpucores", 30), ("nvidia.com/gpumem-percentage", 50),
])
def test_a_hami_sliced_container_keeps_its_request_and_is_reported(resource: str, amount: int) -> None:
    result, report = run(POD.format(slice=resource, amount=amount))
    [pod] = by_kind(result.output, "Pod")
    sliced, whole = pod["spec"]["containers"]
    assert sliced["resources"] == {"limits": {"nvidia.com/gpu": 1, resource: amount}}  # untouched
    assert whole["resources"] == {"claims": [{"name": "accelerators"}]}  # its own exclusive GPU, converted
    not_converted = {f.subject: f for f in report.by_action(Action.NOT_CONVERTED)}
    assert set(not_converted) == {"nvidia.com/gpu", resource}
    assert "HAMi" in not_converted["nvidia.com/gpu"].reason and resource in not_converted["nvidia.com/gpu"].reason
    assert not_converted["nvidia.com/gpu"].where.path == "spec.containers[0].resources"
    assert device_plugin_requests(result.output) == ["nvidia.com/gpu", resource]


def test_hami_slices_alone_are_reported_too() -> None:
    text = POD.format(slice="nvidia.com/gpumem", amount=1000).replace("        nvidia.com/gpu: 1\n        nvidia", "        nvidia", 1)
    result, report = run(text)
    assert [f.subject for f in report.by_action(Action.NOT_CONVERTED)] == ["nvidia.com/gpumem"]
    assert "HAMi" in report.by_action(Action.NOT_CONVERTED)[0].reason


def test_extended_resource_strategy_reports_hami_slices() -> None:
    result, report = run(POD.format(slice="nvidia.com/gpucores", amount=20), strategy="extended-resource")
    left = {(f.where.path, f.subject) for f in report.by_action(Action.NOT_CONVERTED)}
    assert ("spec.containers[0].resources.limits", "nvidia.com/gpu") in left  # a slice, not the whole GPU the class gives
    assert ("spec.containers[1].resources.limits", "nvidia.com/gpu") not in left
    assert "nvidia.com/gpucores" in {subject for _, subject in left}
