"""Where a request misses by a little, the message says how to fix it: typos, near-miss memory, tabs, partitions."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from dra_driver.cli.main import main
from dra_driver.model.memory_hint import memory_near_miss, near_miss
from dra_driver.common.suggest import close_matches, did_you_mean

H100_BYTES = Decimal(81559 * 2**20)  # what an H100 80GB HBM3 reports (dgx-h100 profile)


def outcome(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def claim(tmp_path: Path, expression: str, name: str = "claim.yaml") -> Path:
    path = tmp_path / name
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": expression}}]}}
    path.write_text(yaml.safe_dump({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "namespace": "default"},
                                    "spec": {"devices": {"requests": [request]}}}))  # fmt: skip
    return path


def test_suggestions_are_few_and_close() -> None:
    classes = [f"mig-{p}.nvidia.com" for p in ("1g.5gb", "1g.10gb", "2g.20gb", "3g.40gb")] + ["gpu.nvidia.com", "gpu.amd.com"]
    assert close_matches("gpu.nvidia.cmo", classes) == ["gpu.nvidia.com"]
    assert close_matches("nvidia-mig-1g.5gb", classes)[0] == "mig-1g.5gb.nvidia.com"  # same parts, another order
    assert close_matches("GPU.NVIDIA.COM", classes) == ["gpu.nvidia.com"]
    assert did_you_mean("zzz", classes) == ""


def test_near_miss_memory_says_what_matches() -> None:
    hint = near_miss("80Gi", H100_BYTES)
    assert 'a GPU sold as "80GB" reports 81559Mi = 79.6Gi' in hint and "ask for 80G or 79Gi" in hint
    assert near_miss("80G", H100_BYTES) == ""  # it matches
    assert near_miss("128Gi", H100_BYTES) == ""  # not a near miss: another class of device
    assert memory_near_miss('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0', {"gpu.nvidia.com/memory": "81559Mi"})
    assert not memory_near_miss('device.attributes["gpu.nvidia.com"].index == 0', {"gpu.nvidia.com/memory": "81559Mi"})


def test_template_and_explain_explain_the_80gi_surprise(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = outcome(capsys, ["template", "--model", "H100", "--memory", "80Gi"])
    assert code == 2 and "ask for 80G or 79Gi to match it" in err
    code, out, err = outcome(capsys, ["template", "--model", "H100", "--memory", "79Gi", "--profile", "dgx-h100"])
    assert code == 0 and "kind: ResourceClaimTemplate" in out  # the suggestion works
    selector = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'
    code, out, _ = outcome(capsys, ["explain", str(claim(tmp_path, selector)), "--profile", "dgx-h100"])
    assert code == 1 and 'note: a GPU sold as "80GB" reports 81559Mi = 79.6Gi' in out


def test_a_cel_attribute_typo_names_the_attribute(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = outcome(
        capsys, ["explain", str(claim(tmp_path, 'device.attributes["gpu.nvidia.com"].productname == "x"')), "--profile", "l4", "-o", "json"]
    )
    assert code == 1 and "no such key: productname; did you mean 'productName'?" in out


def test_a_cel_syntax_error_shows_the_whole_line_and_its_caret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expression = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3" && ('
    code, _, err = outcome(capsys, ["explain", str(claim(tmp_path, expression)), "--profile", "l4"])
    lines = err.splitlines()
    assert code == 2 and lines[0].endswith(f"Syntax error at column {len(expression)}:")  # the parser stops at the open '('
    assert lines[1] == f"    {expression}" and lines[2] == "    " + " " * (len(expression) - 1) + "^"


def test_a_tab_in_yaml_names_the_line_and_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tab.yaml"
    path.write_text("apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n\tname: c\n")
    code, _, err = outcome(capsys, ["explain", str(path), "--profile", "l4"])
    assert code == 2 and f"{path}:4:" in err and "line 4 is indented with a tab: YAML indents with spaces only, replace the tab with spaces" in err


@pytest.mark.parametrize(("flags", "says"), [
    (["--partition", "cpx", "--model", "H100"], "partitions (cpx, dpx, qpx) are AMD-only, and H100 is made by nvidia; drop --partition"),
    (["--mig", "1g.10gb", "--model", "MI300X"], "MIG profiles are NVIDIA-only, and MI300X is made by amd; drop --mig"),
])  # fmt: skip
def test_partitions_of_the_other_vendor_are_named(flags: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = outcome(capsys, ["template", *flags])
    assert code == 2 and says in err


@pytest.mark.parametrize(("flags", "says"), [
    (["--vendor", "intel"],
     "--vendor intel: profile dgx-h100 has no gaudi devices (it has nvidia); drop --vendor, or pick a profile with gaudi devices"),
    (["--profile", "mi300x", "--vendor", "nvidia"], "profile mi300x has no nvidia devices (it has amd)"),
    (["--vendor", "nvdia"], "unknown vendor 'nvdia'; did you mean 'nvidia'?"),
])  # fmt: skip
def test_demo_vendor_mistakes_are_usage_errors(flags: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = outcome(capsys, ["demo", *flags])
    assert code == 2 and err.startswith("dra-driver demo: error: ") and says in err


def test_discover_table_writes_booleans_as_yaml_does(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = outcome(capsys, ["discover", "--profile", "mi300x", "--partitioning", "dynamic", "-o", "table"])
    assert code == 0
    assert " true " in out and " false " in out and "True" not in out and "False" not in out


def test_profiles_lists_every_shipped_profile_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    from dra_driver.backend.hardware_profiles import available_profiles

    code, out, _ = outcome(capsys, ["profiles"])
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["NAME", "VENDORS", "DEVICES", "DESCRIPTION"]
    assert [line.split()[0] for line in lines[1:]] == sorted(available_profiles())
    code, out, _ = outcome(capsys, ["profiles", "-o", "json"])
    rows = {row["name"]: row for row in json.loads(out)}
    assert rows["dgx-h100"]["devices"] == 8 and rows["mixed-node"]["vendors"] == ["amd", "nvidia"] and rows["mi300x-cpx"]["devices"] == 64
