"""explain rounds consumable-capacity requests by the device's requestPolicy, as the scheduler does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import alloc_builders as b
import pytest
from explain_testlib import class_docs, explain, fleet_list, write_yaml

GATES = ("--feature-gates", "DRAConsumableCapacity=true")
STEPPED = {"default": "10Gi", "validRange": {"min": "10Gi", "max": "40Gi", "step": "10Gi"}}
LISTED = {"default": "20Gi", "validValues": ["10Gi", "20Gi", "40Gi"]}


def _fleet(tmp_path: Path, policy: dict[str, Any] | None, memory: str = "80Gi") -> Path:
    device = b.device("gpu-0", memory=memory)
    device["allowMultipleAllocations"] = True
    device["capacity"]["bandwidth"] = {"value": "100", "requestPolicy": {"default": "10"}}  # a default alone: room for 10 shares
    if policy is not None:
        device["capacity"]["memory"]["requestPolicy"] = policy
    return fleet_list(tmp_path, [b.resource_slice("node-0", [device])])


def _request(name: str, memory: str | None) -> dict[str, Any]:
    return b.exact(name, capacity={"requests": {"memory": memory}}) if memory else b.exact(name)


def _run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: dict[str, Any] | None, *memory: str | None, gates: tuple[str, ...] = GATES
) -> tuple[int, Any]:
    requests = [_request(f"r{i}", amount) for i, amount in enumerate(memory)]
    claim = write_yaml(tmp_path / "claim.yaml", class_docs() + [b.claim_doc(requests)])
    code, out, _ = explain(capsys, claim, "--fleet", _fleet(tmp_path, policy), *gates, "-o", "json")
    return code, json.loads(out)


def _consumed(report: dict[str, Any]) -> list[str]:
    return [r["consumedCapacity"]["memory"] for r in report["allocations"]["default/claim"]["devices"]["results"]]


def test_no_request_takes_the_policy_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _run(tmp_path, capsys, STEPPED, None)
    assert code == 0
    result = report["allocations"]["default/claim"]["devices"]["results"][0]
    assert result["consumedCapacity"] == {"memory": "10Gi", "bandwidth": "10"}  # every capacity listed


def test_no_request_and_no_policy_takes_the_whole_capacity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _run(tmp_path, capsys, None, None)
    assert code == 0 and _consumed(report) == ["80Gi"]
    code, report = _run(tmp_path, capsys, None, None, "1Gi")
    assert code == 1 and "capacity gpu.nvidia.com/memory: needs" in json.dumps(report)


def test_request_rounded_up_to_the_next_valid_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _run(tmp_path, capsys, LISTED, "5Gi", "21Gi", "40Gi")
    assert code == 1  # 10 + 40 + 40 > 80: rounding is what makes the third share not fit
    assert "capacity gpu.nvidia.com/memory" in json.dumps(report)
    code, report = _run(tmp_path, capsys, LISTED, "5Gi", "21Gi")
    assert code == 0 and _consumed(report) == ["10Gi", "40Gi"]


def test_request_rounded_up_to_min_plus_a_multiple_of_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _run(tmp_path, capsys, STEPPED, "1Gi", "11Gi", "30Gi")
    assert code == 0 and _consumed(report) == ["10Gi", "20Gi", "30Gi"]


def test_shares_add_up_their_rounded_amounts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # As asked, 4 x 15Gi = 60Gi fits in 80Gi; rounded to 20Gi each they take exactly 80Gi.
    code, report = _run(tmp_path, capsys, STEPPED, "15Gi", "15Gi", "15Gi", "15Gi")
    assert code == 0 and _consumed(report) == ["20Gi"] * 4
    code, report = _run(tmp_path, capsys, STEPPED, "15Gi", "15Gi", "15Gi", "15Gi", "1Gi")
    assert code == 1  # the fifth share's 10Gi minimum no longer fits


def test_request_above_the_range_maximum_is_refused_naming_the_capacity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _run(tmp_path, capsys, STEPPED, "50Gi")
    assert code == 1
    assert "capacity gpu.nvidia.com/memory: 50Gi is above the request policy's maximum 40Gi" in json.dumps(report)


def test_request_above_every_valid_value_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _run(tmp_path, capsys, LISTED, "41Gi")
    assert code == 1
    assert "capacity gpu.nvidia.com/memory: 41Gi is above the largest valid value 40Gi" in json.dumps(report)


def test_gate_off_ignores_policy_and_sharing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _run(tmp_path, capsys, STEPPED, "50Gi", gates=())
    assert code == 0  # no sharing, no policy: the device is allocated whole, without consumedCapacity
    result = report["allocations"]["default/claim"]["devices"]["results"][0]
    assert "consumedCapacity" not in result and "shareID" not in result


def test_policy_that_is_not_a_quantity_rules_the_device_out_with_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _run(tmp_path, capsys, {"default": "lots", "validValues": ["10Gi"]}, "10Gi")
    assert code == 1 and "requestPolicy.default 'lots' is not a quantity" in json.dumps(report)
