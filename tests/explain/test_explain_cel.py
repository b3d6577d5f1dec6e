"""explain checks selectors as Kubernetes does: API-server validation for input, the scheduler's environment for matching."""

from __future__ import annotations

import json
from pathlib import Path

import alloc_builders as b
import pytest
from explain_testlib import claim_file, explain, fleet_list, nodes

TEN = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
EXPENSIVE = f"{TEN}.all(x, {TEN}.all(y, {TEN}.all(z, {TEN}.all(z2, {TEN}.all(z3, {TEN}.all(z4, {TEN}.all(z5, int('1'.find('[0-9]*')) < 100)))))))"


def test_selector_over_the_estimated_cost_is_invalid_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = explain(capsys, claim_file(tmp_path, [b.exact("gpu", selectors=(EXPENSIVE,))]), "--fleet", fleet_list(tmp_path, nodes()))
    assert code == 2
    assert "estimated cost 85,555,551 exceeds budget 1,000,000" in err and "requests[0]" in err


def test_allow_multiple_allocations_needs_the_gate_in_a_new_claim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claim = claim_file(tmp_path, [b.exact("gpu", selectors=("device.allowMultipleAllocations == false",))])
    fleet = fleet_list(tmp_path, nodes())
    code, _, err = explain(capsys, claim, "--fleet", fleet)
    assert code == 2 and "undefined field 'allowMultipleAllocations'" in err
    code, out, _ = explain(capsys, claim, "--fleet", fleet, "--feature-gates", "DRAConsumableCapacity=true", "-o", "json")
    assert code == 0
    assert "DRAConsumableCapacity on" in json.loads(out)["fleet"]["celEnvironments"]["validation"]


def test_text_report_names_the_environments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = explain(capsys, claim_file(tmp_path, [b.exact("gpu")]), "--fleet", fleet_list(tmp_path, nodes()))
    assert code == 0
    assert "validated as NewExpressions" in out and "matched as StoredExpressions" in out


@pytest.mark.parametrize("gates", ["no-such-gate=true", "DRAConsumableCapacity=maybe"])
def test_bad_feature_gates_are_invalid_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], gates: str) -> None:
    code, _, err = explain(capsys, claim_file(tmp_path, [b.exact("gpu")]), "--fleet", fleet_list(tmp_path, nodes()), "--feature-gates", gates)
    assert code == 2 and "--feature-gates" in err


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ('quantity("1Gi") < quantity("2Gi")', "found no matching overload for '_<_' applied to '(kubernetes.Quantity, kubernetes.Quantity)'"),
        (
            'device.capacity["gpu.nvidia.com"].memory < quantity("80Gi")',
            "found no matching overload for '_<_' applied to '(kubernetes.Quantity, kubernetes.Quantity)'",
        ),
        (
            '"%d".format([device.capacity["gpu.nvidia.com"].memory]) == "1"',
            "error during formatting: decimal clause can only be used on integers, was given kubernetes.Quantity",
        ),
        ('"%s-%d".format(["a", "b"]) == "a-b"', "error during formatting: decimal clause can only be used on integers, was given string"),
        # cel-go's stringFormatValidator (ext/formatting.go): %s refuses the Kubernetes object types, in list literals too
        (
            '"%s-%d".format([device.capacity["gpu.nvidia.com"].memory, 0]) != ""',
            "error during formatting: string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and "
            "timestamps, was given kubernetes.Quantity",
        ),
        (
            '"%s".format([[semver("1.0.0")]]) != ""',
            "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps, was given "
            "kubernetes.Semver",
        ),
        ('"%.1f".format([1]) != ""', "error during formatting: fixed-point clause can only be used on doubles, was given int"),
        ('"%s".format(["a", "b"]) != ""', "too many arguments supplied to string.format (expected 1, got 2)"),
    ],
)
def test_compile_time_type_errors_are_invalid_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], selector: str, message: str) -> None:
    code, _, err = explain(capsys, claim_file(tmp_path, [b.exact("gpu", selectors=(selector,))]), "--fleet", fleet_list(tmp_path, nodes()))
    assert code == 2 and message in err


def test_mixed_list_inside_format_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    selector = '"%s-%d".format([device.attributes["gpu.nvidia.com"].type, 0]) == "gpu-0"'
    code, _, _ = explain(capsys, claim_file(tmp_path, [b.exact("gpu", selectors=(selector,))]), "--fleet", fleet_list(tmp_path, nodes()))
    assert code == 0
