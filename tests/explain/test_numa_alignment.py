"""resource.kubernetes.io/numaNode (KEP-6072, standard in 1.37) aligns this driver's GPUs with another driver's NIC.

The GPUs' slices come from the driver's own discovery of a profile (mi300x: GPUs 0-3 on NUMA node 0, 4-7 on
node 1); the NIC is a slice of another driver that publishes the same standard attribute.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.backend.vocabulary import NUMA_NODE
from dra_driver.cli.main import main

NIC_DRIVER = "nic.example.com"


def _fleet(tmp_path: Path, capsys: pytest.CaptureFixture[str], nic_numa: int) -> Path:
    assert main(["discover", "--profile", "mi300x", "--node-name", "node-0", "-o", "json"]) == 0
    fleet = json.loads(capsys.readouterr().out)
    nic = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-0-nic"},
        "spec": {
            "driver": NIC_DRIVER,
            "nodeName": "node-0",
            "pool": {"name": "node-0", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "nic-0", "attributes": {NUMA_NODE: {"int": nic_numa}}}],
        },
    }
    fleet["items"].append(nic)
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(fleet))
    return path


def _claim(tmp_path: Path, gpus: int) -> Path:
    docs: list[dict[str, Any]] = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": NIC_DRIVER},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{NIC_DRIVER}"'}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "aligned", "namespace": "default"},
         "spec": {"devices": {
             "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.amd.com", "count": gpus}},
                          {"name": "nic", "exactly": {"deviceClassName": NIC_DRIVER}}],
             "constraints": [{"matchAttribute": NUMA_NODE, "requests": ["gpu", "nic"]}]}}},
    ]  # fmt: skip
    path = tmp_path / "claim.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def _numa_of_gpus(fleet: Path) -> dict[str, int]:
    items = json.loads(fleet.read_text())["items"]
    return {d["name"]: d["attributes"][NUMA_NODE]["int"] for s in items if s["spec"]["driver"] == "gpu.amd.com" for d in s["spec"].get("devices", [])}


@pytest.mark.parametrize("nic_numa", [0, 1])
def test_gpus_follow_the_nic_of_another_driver_to_its_numa_node(tmp_path, capsys, nic_numa):
    fleet = _fleet(tmp_path, capsys, nic_numa)
    assert main(["explain", str(_claim(tmp_path, 2)), "--fleet", str(fleet), "-o", "json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["allocatable"]
    results = result["allocations"]["default/aligned"]["devices"]["results"]
    numa = _numa_of_gpus(fleet)
    gpus = [r["device"] for r in results if r["request"] == "gpu"]
    assert len(gpus) == 2 and {numa[g] for g in gpus} == {nic_numa}
    assert [r["driver"] for r in results if r["request"] == "nic"] == [NIC_DRIVER]


def test_more_gpus_than_the_nics_numa_node_has_is_refused_naming_the_constraint(tmp_path, capsys):
    fleet = _fleet(tmp_path, capsys, 1)
    code = main(["explain", str(_claim(tmp_path, 5)), "--fleet", str(fleet)])
    out = capsys.readouterr().out
    assert code != 0
    assert NUMA_NODE in out
