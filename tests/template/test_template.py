"""`dra-driver template`: each vendor and option, validated against the 1.35 schemas and explained on shipped profiles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.sources import fleet as fleets
from dra_driver.template.known import known_kinds
from dra_driver.cli.main import main
from dra_driver.explain import ExplainRequest, explain
from dra_driver.sources.fleet_source import FleetSource

K8S_VERSION = "1.35.0"


def write(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["template", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def validate_strictly(doc: dict[str, Any]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed (test extra)")
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def devices_of(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["devices"] if doc["kind"] == "ResourceClaim" else doc["spec"]["spec"]["devices"]


def expressions(entry: dict[str, Any]) -> list[str]:
    return [s["cel"]["expression"] for s in entry.get("selectors", [])]


def allocated_on(profile: str, doc: dict[str, Any], tmp_path: Path, partitioning: str = "static") -> list[dict[str, Any]]:
    """The allocation results explain gives the written object on one node of `profile`."""
    path = tmp_path / "written.yaml"
    path.write_text(yaml.safe_dump(doc))
    chosen = explain(ExplainRequest(str(path), FleetSource(profile=profile, partitioning=partitioning))).explanation.chosen
    assert chosen is not None
    (allocation,) = chosen.allocations.values()
    return allocation["devices"]["results"]


# (flags, profile the result must fit on, class of the first choice, selector fragments that must appear)
CASES = [
    (["--vendor", "nvidia", "--count", "8", "--same", "interconnect"], "dgx-h100", "gpu.nvidia.com", []),
    (["--model", "h100", "--memory", "80G"], "dgx-h100", "gpu.nvidia.com", ['productName.contains("H100")', 'quantity("80G")']),
    (
        ["--family", "hopper/cdna3", "--memory", "128Gi", "--count", "2"],
        "mixed-node",
        "accelerator.dra-driver.io",
        ['family in ["cdna3", "hopper"]', "device.capacity[device.driver]"],
    ),
    (["--mig", "3g.20gb", "--count", "2"], "dgx-a100-mig", "mig-3g.20gb.nvidia.com", []),
    (
        ["--partition", "cpx_nps4", "--count", "8", "--same", "numa"],
        "mi300x-cpx",
        "partition.gpu.amd.com",
        ['computePartition == "cpx"', 'memoryPartition == "nps4"'],
    ),
    (["--vendor", "amd", "--family", "cdna2", "--count", "4"], "mi210", "gpu.amd.com", ['family == "cdna2"']),
    (["--vendor", "intel", "--count", "2", "--same", "pcie-root"], "gaudi2-hls", "gaudi.intel.com", []),
    (
        ["--vendor", "gaudi", "--model", "gaudi3", "--count", "4", "--same", "interconnect"],
        "gaudi3-hls",
        "gaudi.intel.com",
        ['"gaudi.intel.com"].model.contains("Gaudi3")'],
    ),
    (["--vendor", "any", "--count", "1"], "l4", "accelerator.dra-driver.io", []),
    (["--model", "B200", "--count", "8", "--same", "interconnect"], "b200", "gpu.nvidia.com", ['productName.contains("B200")']),
    (["--family", "blackwell", "--count", "4", "--same", "interconnect"], "gb200", "accelerator.dra-driver.io", ['family == "blackwell"']),
    (["--model", "H200 NVL", "--count", "4"], "h200-nvl", "gpu.nvidia.com", ['productName.contains("H200 NVL")']),
    (
        ["--model", "MI325X", "--memory", "250Gi", "--count", "8", "--same", "interconnect"],
        "mi325x",
        "gpu.amd.com",
        ['productName.contains("MI325X")', 'quantity("250Gi")'],
    ),
    (
        ["--vendor", "gaudi", "--model", "gaudi3", "--count", "2", "--same", "pcie-root"],
        "gaudi3-pcie",
        "gaudi.intel.com",
        ['"gaudi.intel.com"].model.contains("Gaudi3")'],
    ),
]


@pytest.mark.parametrize(("flags", "profile", "device_class", "fragments"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_each_vendor_and_option_is_valid_and_fits_its_hardware(
    flags: list[str], profile: str, device_class: str, fragments: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = write(capsys, *flags, "--profile", profile)
    assert code == 0, err
    assert "1 of 1 node could hold it now" in err
    doc = yaml.safe_load(out)
    validate_strictly(doc)
    (request,) = devices_of(doc)["requests"]
    assert request["exactly"]["deviceClassName"] == device_class
    written = " ".join(expressions(request["exactly"]))
    assert all(fragment in written for fragment in fragments), written
    if "--same" in flags:
        assert devices_of(doc)["constraints"][0]["requests"] == ["accel"]
    assert allocated_on(profile, doc, tmp_path)


def test_fallbacks_become_first_available_in_order(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = write(capsys, "--count", "4", "--model", "H100", "--fallback", "8xA100", "--fallback", "count=2,mig=3g.20gb")
    assert code == 0, err
    doc = yaml.safe_load(out)
    validate_strictly(doc)
    entries = devices_of(doc)["requests"][0]["firstAvailable"]
    assert [(e["name"], e["count"], e["deviceClassName"]) for e in entries] == [
        ("h100", 4, "gpu.nvidia.com"),
        ("a100", 8, "gpu.nvidia.com"),
        ("3g-20gb", 2, "mig-3g.20gb.nvidia.com"),
    ]
    assert {r["request"] for r in allocated_on("dgx-h100", doc, tmp_path)} == {"accel/h100"}
    assert {r["request"] for r in allocated_on("dgx-a100-mig", doc, tmp_path)} == {"accel/3g-20gb"}  # no H100, only 4 whole A100s
    assert "# choice 2: 8 x nvidia A100 (when the earlier ones cannot be allocated)" in out


@pytest.mark.parametrize(("sharing", "expected"), [
    ("time-slicing:long", {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}),
    ("mps:threads=50,pinned-memory=10Gi",
     {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": "10Gi"}}),
])  # fmt: skip
def test_sharing_is_upstream_nvidia_config_the_backend_accepts(sharing: str, expected: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    from dra_driver_nvidia.config import validate_config

    code, out, err = write(capsys, "--model", "H100", "--fallback", "mig=1g.10gb", "--sharing", sharing)
    assert code == 0, err
    doc = yaml.safe_load(out)
    validate_strictly(doc)
    configs = devices_of(doc)["config"]
    assert [(c["requests"], c["opaque"]["parameters"]["kind"]) for c in configs] == [
        (["accel/h100"], "GpuConfig"),
        (["accel/1g-10gb"], "MigDeviceConfig"),
    ]
    for config in configs:
        # A MIG device takes no time-slice interval (it applies to whole GPUs; the driver refuses it at prepare).
        wanted = (
            expected if config["opaque"]["parameters"]["kind"] == "GpuConfig" else {k: v for k, v in expected.items() if k != "timeSlicingConfig"}
        )
        assert config["opaque"]["driver"] == "gpu.nvidia.com" and config["opaque"]["parameters"]["sharing"] == wanted
        validate_config(config["opaque"]["parameters"])  # raises ConfigError on anything upstream's decoder refuses


def test_sharing_on_a_template_says_nothing_is_shared_across_pods_and_how_to_share(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = write(capsys, "--model", "H100", "--sharing", "mps:threads=50")
    assert code == 0 and "kind: ResourceClaimTemplate" in out
    assert "shares nothing across pods" in err and "add --claim" in err and "resourceClaimName" in err
    code, out, err = write(capsys, "--model", "H100", "--sharing", "mps:threads=50", "--claim")
    assert code == 0 and "kind: ResourceClaim\n" in out and "shares nothing" not in err
    code, out, err = write(capsys, "--model", "H100")
    assert "shares nothing" not in err
    code, out, err = write(capsys, "--model", "H100", "--sharing", "mps", "--share-memory", "20Gi")  # each pod's claim takes a share
    assert code == 0 and "shares nothing" not in err


def test_share_memory_asks_for_part_of_one_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = write(capsys, "--model", "H100", "--share-memory", "20Gi")
    assert code == 0, err
    doc = yaml.safe_load(out)
    validate_strictly(doc)
    assert devices_of(doc)["requests"][0]["exactly"]["capacity"] == {"requests": {"memory": "20Gi"}}
    assert "holds this one to the amount" in out


def test_admin_access_claim(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = write(capsys, "--vendor", "nvidia", "--admin-access", "--claim", "-n", "ops", "--name", "gpu-monitor")
    assert code == 0, err
    doc = yaml.safe_load(out)
    validate_strictly(doc)
    assert doc["kind"] == "ResourceClaim" and doc["metadata"] == {"name": "gpu-monitor", "namespace": "ops"}
    assert devices_of(doc)["requests"][0]["exactly"]["adminAccess"] is True
    assert "resource.kubernetes.io/admin-access=true" in out


def test_unshipped_mig_profile_uses_the_generic_class_and_a_selector(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = write(capsys, "--mig", "1g.12gb")
    assert code == 2  # no shipped profile has it
    code, out, err = write(capsys, "--mig", "1g.12gb", "--no-hardware-check")
    assert code == 0, err
    exactly = devices_of(yaml.safe_load(out))["requests"][0]["exactly"]
    assert exactly["deviceClassName"] == "mig.nvidia.com" and expressions(exactly) == ['device.attributes["gpu.nvidia.com"].profile == "1g.12gb"']


def test_every_selector_and_part_carries_a_comment(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = write(capsys, "--model", "MI300X", "--memory", "128Gi", "--family", "cdna3", "--count", "2", "--same", "interconnect")
    lines = out.splitlines()
    for index, line in enumerate(lines):
        if line.strip().startswith("- cel:") or line.strip() == "- requests:":
            assert lines[index - 1].strip().startswith("#"), f"no comment above line {index}: {line}"
    assert "deviceClassName: gpu.amd.com  # whole AMD GPUs" in out
    assert "# all devices on one NVLink clique / XGMI hive / Gaudi box (dra-driver.io/interconnectDomain equal)" in out


def test_same_wishes_give_the_same_yaml_whatever_the_flag_order(capsys: pytest.CaptureFixture[str]) -> None:
    _, first, _ = write(capsys, "--count", "2", "--model", "H100", "--same", "interconnect", "--fallback", "2xA100")
    _, second, _ = write(capsys, "--fallback", "2xA100", "--same", "interconnect", "--model", "H100", "--count", "2")
    assert first == second and first.startswith("# Written by: dra-driver template --count 2 --model H100 --fallback 2xA100 --same interconnect\n")


def test_impossible_request_names_the_nearest_known_devices(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = write(capsys, "--memory", "300Gi")
    assert code == 2 and out == ""
    assert "no known hardware could hold this claim" in err
    nearest = err.split("nearest known devices:", 1)[1].splitlines()[2]
    assert nearest.strip().startswith("AMD_Instinct_MI325X") and "memory 262128Mi < 300Gi" in nearest
    code, _, err = write(capsys, "--model", "H100", "--count", "16")
    assert code == 2 and "at most 8 on one node, 16 wanted" in err


@pytest.mark.parametrize(("flags", "names"), [
    (["--vendor", "nvidia", "--count", "2", "--same", "numa"], ["--same", "pcie-root"]),
    (["--vendor", "amd", "--sharing", "mps"], ["--sharing", "nvidia", "no per-process memory or compute limit", "--partition cpx"]),
    (["--vendor", "gaudi", "--sharing", "time-slicing"], ["--sharing", "cannot be shared", "one process at a time"]),
    (["--vendor", "nvidia", "--admin-access", "--fallback", "2"], ["--admin-access", "fallbacks"]),
    (["--model", 'H100") || true || ("'], ["model", "letters, digits"]),
    (["--model", "H100\n"], ["model", "letters, digits"]),  # Python's `$` also matches before a final newline
    (["--mig", "1g.10gb\n"], ["mig", "profile name"]),
    (["--vendor", "acme"], ["vendor", "nvidia, amd, gaudi, any"]),
    (["--memory", "lots"], ["memory", "40Gi"]),
    (["--count", "0"], ["count", "1 to"]),
    (["--mig", "1g.10gb", "--vendor", "amd"], ["MIG", "nvidia"]),
    (["--partition", "spx"], ["spx", "whole GPU"]),
    (["--sharing", "mps:threads=150"], ["threads", "0..100"]),
    (["--share-memory", "512Mi", "--model", "H100"], ["--share-memory", "at least 1Gi"]),
    (["--share-memory", "20Gi", "--mig", "1g.10gb"], ["--share-memory", "without --mig"]),
    (["--share-memory", "20Gi", "--vendor", "amd"], ["--share-memory", "--vendor nvidia"]),
    (["--mig", "1g.10gb", "--sharing", "time-slicing:Long"],
     ["--sharing", "applies to whole GPUs", "every choice is a MIG device", "without an interval"]),
    (["--fallback", "size=8"], ["unknown key 'size'"]),
    (["--model", "B300"], ["no known product", "H100", "NVIDIA B200"]),
    (["--name", "Not_Valid"], ["--name"]),
    (["--vendor", "nvidia", *sum((["--fallback", "1"] for _ in range(8)), [])], ["at most 7"]),
])  # fmt: skip
def test_bad_wishes_are_errors_naming_the_flag_and_the_fix(flags: list[str], names: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = write(capsys, *flags)
    assert code == 2 and out == ""
    assert all(name in err for name in names), err


def test_fleet_check_says_how_many_nodes_can_hold_it_and_why_not(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fleet = fleets.simulated("dgx-h100", 2)
    held = [{"request": "r", "driver": "gpu.nvidia.com", "pool": "node-0", "device": f"gpu-{i}"} for i in range(6)]
    claim = {"kind": "ResourceClaim", "metadata": {"name": "busy", "namespace": "x"}, "status": {"allocation": {"devices": {"results": held}}}}
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*fleet.slices, claim]}))
    code, _, err = write(capsys, "--vendor", "nvidia", "--count", "4", "--fleet", str(path))
    assert code == 0 and "1 of 2 nodes could hold it now" in err and "node-0" in err
    code, _, err = write(capsys, "--vendor", "nvidia", "--count", "2", "--same", "pcie-root", "--fleet", str(path))
    assert code == 1 and "0 of 2 nodes could hold it now" in err and "pcieRoot" in err


def test_interconnect_constraint_leaves_out_mig_choices(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """MIG devices publish no interconnect domain: a constraint naming them could never hold."""
    code, out, err = write(capsys, "--count", "4", "--model", "H100", "--fallback", "count=2,mig=3g.20gb", "--same", "interconnect")
    assert code == 0, err
    doc = yaml.safe_load(out)
    validate_strictly(doc)
    assert devices_of(doc)["constraints"] == [{"requests": ["accel/h100"], "matchAttribute": "dra-driver.io/interconnectDomain"}]
    assert {r["request"] for r in allocated_on("dgx-a100-mig", doc, tmp_path)} == {"accel/3g-20gb"}
    code, _, err = write(capsys, "--mig", "1g.10gb", "--count", "2", "--same", "interconnect")
    assert code == 2 and "--same pcie-root" in err


@pytest.mark.parametrize(("flags", "product", "profile"), [
    (["--family", "blackwell"], "NVIDIA B200", "b200"),
    (["--family", "blackwell", "--memory", "185Gi"], "NVIDIA GB200", "gb200"),
    (["--model", "GB200", "--count", "4", "--same", "interconnect"], "NVIDIA GB200", "gb200"),
    (["--model", "MI325X"], "AMD_Instinct_MI325X", "mi325x"),
    (["--vendor", "gaudi", "--model", "Gaudi3", "--count", "2", "--same", "pcie-root"], "Gaudi3", "gaudi3-pcie"),
])  # fmt: skip
def test_current_products_are_known_hardware(flags: list[str], product: str, profile: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Blackwell, MI325X and Gaudi3 PCIe are shipped profiles, so template finds them without --no-hardware-check."""
    code, out, err = write(capsys, *flags, "--profile", profile)
    assert code == 0, err
    assert "1 of 1 node could hold it now" in err
    kinds = [k for k in known_kinds() if k.product == product and not k.partition]
    assert kinds and profile in kinds[0].profiles


def test_family_help_and_errors_name_the_families_of_the_shipped_profiles(capsys: pytest.CaptureFixture[str]) -> None:
    """A new architecture (Blackwell) is found only by someone who is told its name."""
    with pytest.raises(SystemExit):
        main(["template", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    shipped = {kind.family for kind in known_kinds()}
    assert {"blackwell", "hopper", "cdna3", "gaudi3"} <= shipped
    missing = sorted(family for family in shipped if family not in help_text)
    assert not missing, f"--family help (dra_driver/cli/template.py) should name {missing}"
    code, _, err = write(capsys, "--family", "hopper!")
    assert code == 2 and "blackwell" in err


def help_examples() -> list[list[str]]:
    """The command lines `dra-driver template --help` shows (its module docstring)."""
    import shlex

    from dra_driver.cli import template as command

    return [shlex.split(line.strip())[2:] for line in (command.__doc__ or "").splitlines() if line.strip().startswith("dra-driver template ")]


@pytest.mark.parametrize("example", help_examples(), ids=lambda words: " ".join(words)[:40])
def test_every_help_example_works(example: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A --help example that no longer works (the MIG one answered "0 of 4 nodes could hold it now") fails here."""
    code, out, err = write(capsys, *example)
    assert code == 0, err  # 1 when no node of the example's fleet could hold it


def test_the_docs_impossible_request_example_is_what_template_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/template.md's `--memory` example: the command, its exit code and its lines (profile count included) as printed."""
    import re
    import shlex

    text = (Path(__file__).resolve().parents[2] / "docs" / "template.md").read_text()
    block = re.search(r"```\n   \$ (dra-driver template --memory [^\n]+)\n(.*?)\n   ```", text, re.S)
    assert block, "docs/template.md lost its impossible-request example"
    code, _, err = write(capsys, *shlex.split(block.group(1))[2:])
    assert code == 2
    assert err.splitlines() == [line.removeprefix("   ") for line in block.group(2).splitlines()]


def test_notes_follow_the_warning_convention(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = write(capsys, "--model", "H100", "--sharing", "mps:threads=50")
    assert code == 0 and err.startswith("dra-driver template: warning: --sharing on a ResourceClaimTemplate shares nothing")


def test_json_output_is_the_yaml_object(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = write(capsys, "--model", "H100", "--count", "2")
    code_json, out_json, _ = write(capsys, "--model", "H100", "--count", "2", "-o", "json")
    assert code == code_json == 0
    assert json.loads(out_json) == yaml.safe_load(out)


def test_a_fleet_with_its_own_classes_but_not_the_shipped_ones_holds_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A cluster dump whose DeviceClasses lack the shipped ones: the written claim names a class that is not there."""
    other = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "other.example.com"}, "spec": {}}
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*fleets.simulated("dgx-h100", 1).slices, other]}))
    code, out, err = write(capsys, "--vendor", "nvidia", "--fleet", str(path))
    assert code == 1 and "kind: ResourceClaimTemplate" in out
    assert "0 of 1 node could hold it now" in err and "the fleet has no DeviceClass gpu.nvidia.com" in err


def test_a_fallback_note_is_one_warning_line_without_a_second_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = write(capsys, "--model", "H100", "--fallback", "8xA100")
    lines = [line for line in err.splitlines() if "choice 2" in line]
    assert code == 0 and lines and all(line.startswith("dra-driver template: warning: choice 2") for line in lines), err
