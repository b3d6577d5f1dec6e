"""`dra-driver discover` end to end: real backends over their lowest-layer fakes."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from dra_driver.cli.main import main
from dra_driver.model import validate_slices

PROFILES = {
    # profile: {driver: number of devices in static mode}
    "dgx-h100": {"gpu.nvidia.com": 8},
    "h200": {"gpu.nvidia.com": None},
    "h200-nvl": {"gpu.nvidia.com": 4},
    "b200": {"gpu.nvidia.com": 8},
    "gb200": {"gpu.nvidia.com": 4},
    "l4": {"gpu.nvidia.com": None},
    "t4": {"gpu.nvidia.com": None},
    "dgx-a100-mig": {"gpu.nvidia.com": None},
    "mi300x": {"gpu.amd.com": 8},
    "mi325x": {"gpu.amd.com": 8},
    "mi300x-cpx": {"gpu.amd.com": None},
    "mi250x": {"gpu.amd.com": None},
    "mi210": {"gpu.amd.com": None},
    "gaudi2-hls": {"gaudi.intel.com": 8},
    "gaudi3-hls": {"gaudi.intel.com": 8},
    "gaudi3-pcie": {"gaudi.intel.com": 4},
    "mixed-node": {"gpu.nvidia.com": 2, "gpu.amd.com": 2},
}


def discover(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["discover", "--node-name", "node-a", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def devices_by_driver(listing: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in listing["items"]:
        counts[item["spec"]["driver"]] = counts.get(item["spec"]["driver"], 0) + len(item["spec"].get("devices") or [])
    return counts


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_every_profile_prints_valid_slices(capsys: pytest.CaptureFixture[str], profile: str, mode: str) -> None:
    code, out, err = discover(capsys, "--profile", profile, "--partitioning", mode, "-o", "json")
    assert code == 0, err
    listing = json.loads(out)
    assert listing["apiVersion"] == "v1" and listing["kind"] == "List"
    validate_slices(listing["items"])
    counts = devices_by_driver(listing)
    assert set(counts) == set(PROFILES[profile])
    assert all(item["spec"]["nodeName"] == "node-a" and item["spec"]["pool"]["name"] == "node-a" for item in listing["items"])
    if mode == "static":
        for driver, expected in PROFILES[profile].items():
            if expected is not None:
                assert counts[driver] == expected


def test_dgx_h100_gpus_report_h100_memory(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = discover(capsys, "--profile", "dgx-h100", "-o", "json")
    devices = [d for item in json.loads(out)["items"] for d in item["spec"]["devices"]]
    assert code == 0 and len(devices) == 8
    assert {d["capacity"]["memory"]["value"] for d in devices} == {"81559Mi"}


def test_dynamic_mode_adds_counter_sets_and_more_devices(capsys: pytest.CaptureFixture[str]) -> None:
    _, static_out, _ = discover(capsys, "--profile", "dgx-h100", "-o", "json")
    _, dynamic_out, _ = discover(capsys, "--profile", "dgx-h100", "--partitioning", "dynamic", "-o", "json")
    static_items, dynamic_items = json.loads(static_out)["items"], json.loads(dynamic_out)["items"]
    assert not any("sharedCounters" in i["spec"] for i in static_items)
    counter_sets = [cs for i in dynamic_items for cs in i["spec"].get("sharedCounters") or []]
    assert len(counter_sets) == 8
    assert devices_by_driver(json.loads(dynamic_out))["gpu.nvidia.com"] > 8


def test_yaml_output_matches_json(capsys: pytest.CaptureFixture[str]) -> None:
    _, as_json, _ = discover(capsys, "--profile", "mixed-node", "-o", "json")
    _, as_yaml, _ = discover(capsys, "--profile", "mixed-node", "-o", "yaml")
    assert yaml.safe_load(as_yaml) == json.loads(as_json)


def test_table_output_lists_devices(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = discover(capsys, "--profile", "mixed-node", "-o", "table")
    assert code == 0
    assert "gpu.nvidia.com" in out and "gpu.amd.com" in out
    assert "4 devices" in out


def test_no_accelerators_means_empty_inventory_and_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    # This machine has no GPU, no libnvidia-ml, no amdsmi and no habanalabs sysfs.
    code, out, err = discover(capsys, "-o", "json")
    assert code == 0
    assert json.loads(out)["items"] == []
    assert "note:" in err


def test_unknown_profile_is_an_error_naming_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = discover(capsys, "--profile", "dgx-h999")
    assert code == 2 and "unknown profile 'dgx-h999'" in err and "dgx-h100" in err


def test_output_is_identical_across_processes_and_hash_seeds() -> None:
    """Same inventory, identical slices: nothing may depend on set/dict hash order."""
    import os
    import subprocess
    import sys

    outputs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "dra_driver.cli.main",
                "discover",
                "--profile",
                "mixed-node",
                "--partitioning",
                "dynamic",
                "--node-name",
                "n",
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1] and '"sharedCounters"' in outputs[0]


def test_discover_lays_out_like_the_publisher(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    """70 GPUs: the daemon reserves room for health taints (64 per slice); discover must print the same."""
    import yaml as _yaml

    base = _yaml.safe_load(open(__import__("dra_driver_nvidia").__path__[0] + "/profiles/t4.yaml"))
    gpu = base["nvidia"]["gpus"][0]
    base["nvidia"]["gpus"] = [
        dict(gpu, uuid=f"GPU-00000000-0000-0000-0000-{i:012d}", minor=i, pciBusId=f"00000000:{i + 1:02X}:00.0") for i in range(70)
    ]
    path = tmp_path / "t4x70.yaml"
    path.write_text(_yaml.safe_dump(base))
    code, out, err = discover(capsys, "--profile", str(path), "-o", "json")
    assert code == 0, err
    assert [len(i["spec"]["devices"]) for i in json.loads(out)["items"]] == [64, 6]
