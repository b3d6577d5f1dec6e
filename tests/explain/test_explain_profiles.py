"""explain against simulated fleets (--profile) and the shipped DeviceClasses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import alloc_builders as b
import pytest
import yaml

from dra_driver.cli.main import main
from dra_driver.backend.registry import backend_classes

NV = b.NV
needs_nvidia = pytest.mark.skipif("nvidia" not in backend_classes(), reason="NVIDIA backend not installed")
needs_amd = pytest.mark.skipif("amd" not in backend_classes(), reason="AMD backend not installed")


def profile_class(name: str) -> str:
    return f'device.driver == "{NV}" && device.attributes["{NV}"].type == "mig" && device.attributes["{NV}"].profile == "{name}"'


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], docs: list[dict[str, Any]], *argv: str) -> tuple[int, dict[str, Any]]:
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    code = main(["explain", str(path), *argv, "-o", "json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out else {}


def mig(name: str, profile: str, count: int = 1) -> dict[str, Any]:
    return b.exact(name, "mig.nvidia.com", count=count, selectors=(f'device.attributes["{NV}"].profile == "{profile}"',))


def results(report: dict[str, Any]) -> list[tuple[str, str]]:
    return [(r["request"], r["device"]) for r in report["allocations"]["default/claim"]["devices"]["results"]]


@needs_nvidia
def test_shipped_classes_and_first_available_falls_back_to_mig(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Static MIG on a DGX A100: gpu-4..7 are whole GPUs, gpu-0..2 carry MIG devices.
    request = {
        "name": "accel",
        "firstAvailable": [
            b.sub("whole", "gpu.nvidia.com", count=5),
            b.sub("slice", "mig.nvidia.com", selectors=(f'device.attributes["{NV}"].profile == "3g.20gb"',)),
        ],
    }
    code, report = run(tmp_path, capsys, [b.claim_doc([request])], "--profile", "dgx-a100-mig")
    assert code == 0
    assert results(report) == [("accel/slice", "gpu-1-mig-3g20gb-9-0")]
    whole = next(r for r in report["requests"] if r["request"] == "accel/whole")
    assert len(whole["nodes"]["node-0"]["matched"]) == 4


@needs_nvidia
def test_dynamic_mig_counters_prevent_over_allocation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("--profile", "dgx-a100-mig", "--partitioning", "dynamic")
    same_gpu = [{"matchAttribute": f"{NV}/parentUUID", "requests": ["big", "small"]}]
    # 4g.20gb uses memory slices 0-3; a 3g.20gb at placement 4 still fits next to it.
    code, report = run(tmp_path, capsys, [b.claim_doc([mig("big", "4g.20gb"), mig("small", "3g.20gb")], same_gpu)], *argv)
    assert code == 0
    # gpu-0..2 carry admin-created MIG instances (never taken over): the first free GPU is gpu-3.
    assert results(report) == [("big", "gpu-3-mig-4g20gb-5-0"), ("small", "gpu-3-mig-3g20gb-9-4")]
    # 7g.40gb uses the whole GPU: no 1g.5gb of the same GPU fits beside it.
    code, report = run(tmp_path, capsys, [b.claim_doc([mig("big", "7g.40gb"), mig("small", "1g.5gb")], same_gpu)], *argv)
    assert code == 1
    reasons = "\n".join(report["nodes"][0]["reasons"])
    assert "no combination satisfies the constraints and shared counters" in reasons
    # Eight whole GPUs are not on offer: gpu-0..2 are in MIG mode with admin instances.
    code, report = run(tmp_path, capsys, [b.claim_doc([b.exact("gpus", "gpu.nvidia.com", count=8), mig("small", "1g.5gb")])], *argv)
    assert code == 1


@needs_nvidia
def test_profile_fleet_with_many_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run(tmp_path, capsys, [b.claim_doc([b.exact("gpus", "gpu.nvidia.com", count=4)])], "--profile", "dgx-a100-mig", "--nodes", "3")
    assert code == 0
    assert report["fleet"]["nodes"] == 3 and report["node"] == "node-0"


@needs_amd
def test_match_attribute_on_xgmi_hive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    constraint = [{"matchAttribute": "dra-driver.io/interconnectDomain"}]
    code, report = run(tmp_path, capsys, [b.claim_doc([b.exact("gpus", "gpu.amd.com", count=8)], constraint)], "--profile", "mi300x")
    assert code == 0 and len(results(report)) == 8
    # A device lacking the attribute can never satisfy it.
    missing = [{"matchAttribute": "dra-driver.io/noSuchDomain"}]
    code, report = run(tmp_path, capsys, [b.claim_doc([b.exact("gpus", "gpu.amd.com", count=2)], missing)], "--profile", "mi300x")
    assert code == 1
    assert "does not have this attribute" in "\n".join(report["nodes"][0]["reasons"])


def test_unknown_profile_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump(b.claim_doc([b.exact("gpu")])))
    assert main(["explain", str(path), "--profile", "no-such-profile"]) == 2
    assert "unknown profile" in capsys.readouterr().err
