"""A claim asking for a share of a GPU (`template --share-memory`) is checkable offline: a --profile fleet can
simulate nodes running --consumable-gpu-memory, and explain says when a claim would hold a whole GPU instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dra_driver.cli.main import main

GATE_ON = ("--feature-gates", "DRAConsumableCapacity=true")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main([*argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _shares(tmp_path: Path, capsys: pytest.CaptureFixture[str], claims: int) -> Path:
    """`claims` ResourceClaims as `template --vendor nvidia --share-memory 20Gi --claim` writes them."""
    code, out, err = _run(capsys, "template", "--vendor", "nvidia", "--share-memory", "20Gi", "--claim", "--no-hardware-check")
    assert code == 0, err
    written = yaml.safe_load(out)
    docs = [{**written, "metadata": {"name": f"share-{index}", "namespace": "ml"}} for index in range(claims)]
    path = tmp_path / "shares.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def _results(out: str) -> list[dict[str, object]]:
    report = json.loads(out)
    return [result for allocation in report["allocations"].values() for result in allocation["devices"]["results"]]


def test_consumable_gpu_memory_profile_lets_claims_share_one_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claims = _shares(tmp_path, capsys, 3)
    code, out, err = _run(capsys, "explain", str(claims), "--profile", "dgx-h100", "--consumable-gpu-memory", *GATE_ON, "-o", "json")
    assert code == 0, err
    results = _results(out)
    assert {r["device"] for r in results} == {"gpu-0"}  # three 20Gi shares of one 80GB GPU
    assert all(r.get("shareID") and r["consumedCapacity"] == {"memory": "20Gi"} for r in results)
    assert not json.loads(out)["notes"]
    assert "consumable GPU memory" in json.loads(out)["fleet"]["sources"][0]


def test_without_consumable_nodes_explain_says_each_claim_holds_a_whole_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claims = _shares(tmp_path, capsys, 3)
    code, out, _ = _run(capsys, "explain", str(claims), "--profile", "dgx-h100", *GATE_ON, "-o", "json")
    assert code == 0
    assert len({r["device"] for r in _results(out)}) == 3 and not any("shareID" in r for r in _results(out))
    (note,) = json.loads(out)["notes"]
    assert "no device of this fleet allows multiple allocations" in note and "--consumable-gpu-memory" in note


def test_with_the_gate_off_explain_says_capacity_is_dropped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claims = _shares(tmp_path, capsys, 1)
    for extra in ((), ("--consumable-gpu-memory",)):
        code, out, _ = _run(capsys, "explain", str(claims), "--profile", "dgx-h100", *extra)
        assert code == 0
        assert "DRAConsumableCapacity is off" in out and "whole device" in out, extra


def test_consumable_gpu_memory_needs_a_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claims = _shares(tmp_path, capsys, 1)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    code, out, err = _run(capsys, "explain", str(claims), "--fleet", str(fleet), "--consumable-gpu-memory")
    assert code == 2 and out == ""
    assert "--consumable-gpu-memory" in err and "--profile" in err


def test_template_share_memory_says_when_the_fleet_cannot_share(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "template", "--vendor", "nvidia", "--share-memory", "20Gi", "--profile", "dgx-h100")
    assert code == 0 and "no device of this fleet allows multiple allocations" in err
    code, _, err = _run(capsys, "template", "--vendor", "nvidia", "--share-memory", "20Gi", "--profile", "dgx-h100", "--consumable-gpu-memory")
    assert code == 0 and "allows multiple allocations" not in err and "consumable GPU memory" in err


def test_discover_publishes_shareable_gpus_with_consumable_gpu_memory(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "discover", "--profile", "dgx-h100", "-o", "json", "--consumable-gpu-memory")
    assert code == 0, err
    devices = [d for item in json.loads(out)["items"] for d in item["spec"].get("devices") or []]
    assert devices and all(d.get("allowMultipleAllocations") is True for d in devices)
    assert all("requestPolicy" in d["capacity"]["memory"] for d in devices)
