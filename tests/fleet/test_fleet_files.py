"""The fleet view from files: shared counters, blocked partitions, taints, admin access, odd claims."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.sources import fleet as fleets
from dra_driver.cli.main import main
from dra_driver.explain import ExplainRequest, explain
from dra_driver.sources.fleet_source import FleetSource
from dra_driver.allocator.pools import build_pools
from dra_driver.common.errors import ValidationError
from dra_driver.fleet import Filters, build_view

NV = "gpu.nvidia.com"


def allocated(fleet_file: Path, tmp: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with the status.allocation explain's allocator gives it on the fleet file."""
    path = tmp / "claim.yaml"
    path.write_text(yaml.safe_dump(doc))
    chosen = explain(ExplainRequest(str(path), FleetSource(paths=(str(fleet_file),)))).explanation.chosen
    assert chosen is not None
    return {**doc, "status": {"allocation": chosen.allocations[f"{doc['metadata']['namespace']}/{doc['metadata']['name']}"]}}


def mig_claim(profile: str) -> dict[str, Any]:
    request = {"name": "mig", "exactly": {"deviceClassName": f"mig-{profile}.nvidia.com"}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "slice", "namespace": "ml"},
        "spec": {"devices": {"requests": [request]}},
    }


def test_a_partition_in_use_blocks_its_whole_gpu_and_uses_counters(tmp_path: Path) -> None:
    fleet = fleets.simulated("dgx-h100", 1, "dynamic")
    fleet_file = tmp_path / "fleet.json"
    fleet_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": fleet.slices}))
    fleet.claims = [allocated(fleet_file, tmp_path, mig_claim("1g.10gb"))]
    view = build_view(fleet, Filters())
    (held,) = [d for d in view.devices if d.state == "allocated"]
    gpu = held.device.split("-mig-")[0]
    whole = next(d for d in view.devices if d.device == gpu)
    assert whole.state == "blocked" and whole.blocked_by.startswith(f"{gpu}-counter-set/")
    used = {c.counter: (c.used, c.left) for c in view.counters if c.counter_set == f"{gpu}-counter-set" and c.in_use}
    assert used["multiprocessors"][0] == "16" and "memory" in used
    other = next(d for d in view.devices if d.device == "gpu-7")
    assert other.state == "free"
    assert sum(g.total for g in view.groups) == 208 == sum(sum(g.counts.values()) for g in view.groups)


def test_taints_admin_access_and_devices_no_slice_publishes(tmp_path: Path) -> None:
    fleet = fleets.simulated("dgx-h100", 1)
    devices = fleet.slices[0]["spec"]["devices"]
    devices[0]["taints"] = [{"key": f"{NV}/xid", "value": "79", "effect": "NoSchedule"}]
    devices[1]["taints"] = [{"key": "info", "effect": "None"}]  # not blocking
    results = [
        {"request": "probe", "driver": NV, "pool": "node-0", "device": devices[2]["name"], "adminAccess": True},
        {"request": "gone", "driver": NV, "pool": "node-0", "device": "gpu-99"},
    ]
    fleet.claims = [
        {"kind": "ResourceClaim", "metadata": {"name": "monitor", "namespace": "ops"}, "status": {"allocation": {"devices": {"results": results}}}}
    ]
    view = build_view(fleet, Filters())
    states = {d.device: d.state for d in view.devices}
    assert states[devices[0]["name"]] == "tainted" and states[devices[1]["name"]] == "free"
    assert states[devices[2]["name"]] == "free"  # adminAccess shares the device, it holds nothing
    assert [h.admin_access for h in next(d for d in view.devices if d.device == devices[2]["name"]).holders] == [True]
    assert [(u.device, u.holder.label) for u in view.unpublished] == [("gpu-99", "ops/monitor")]


@pytest.mark.parametrize(
    "claims",
    [
        [{"kind": "ResourceClaim"}],  # no metadata
        [
            {
                "kind": "ResourceClaim",
                "metadata": {"name": "x"},
                "status": {"allocation": {"devices": {"results": [{"driver": NV, "pool": 3}, "junk"]}}},
            }
        ],
        [{"kind": "ResourceClaim", "metadata": {"name": "y"}, "status": {"allocation": "junk", "reservedFor": "junk"}}],
    ],
)
def test_malformed_claims_are_skipped_and_counted_not_fatal(claims: list[dict[str, Any]]) -> None:
    fleet = fleets.simulated("l4", 1)
    fleet.claims = copy.deepcopy(claims)
    view = build_view(fleet, Filters())
    assert [d.state for d in view.devices] == ["free"]
    assert all("malformed" in note for note in view.notes)


def test_cli_reads_fleet_files_with_claims_and_pods(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = fleets.simulated("l4", 2)
    result = {"request": "gpu", "driver": NV, "pool": "node-1", "device": "gpu-0"}
    claim = {
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "web"},
        "status": {"allocation": {"devices": {"results": [result]}}, "reservedFor": [{"resource": "pods", "name": "web-0", "uid": "u"}]},
    }
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "web"}, "status": {"phase": "Running"}}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all([*fleet.slices, claim, pod]))
    assert main(["fleet", "--fleet", str(path), "-o", "json", "--node", "node-1"]) == 0
    (device,) = json.loads(capsys.readouterr().out)["devices"]
    assert device["holders"][0]["pods"] == [{"name": "web-0", "phase": "Running"}]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"kind": "Secret", "metadata": {"name": "s"}}))
    assert main(["fleet", "--fleet", str(bad)]) == 2
    assert "'Secret'" in capsys.readouterr().err


def test_wide_lists_every_device_with_pool_memory_holders_pods_and_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = fleets.simulated("l4", 2)
    fleet.slices[0]["spec"]["devices"][0]["taints"] = [{"key": f"{NV}/xid", "value": "79", "effect": "NoSchedule"}]
    result = {"request": "gpu", "driver": NV, "pool": "node-1", "device": "gpu-0"}
    claim = {
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "web"},
        "status": {"allocation": {"devices": {"results": [result]}}, "reservedFor": [{"resource": "pods", "name": "web-0", "uid": "u"}]},
    }
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "web"}, "status": {"phase": "Pending"}}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all([*fleet.slices, claim, pod]))
    assert main(["fleet", "--fleet", str(path)]) == 0
    table = capsys.readouterr().out
    assert main(["fleet", "--fleet", str(path), "-o", "wide"]) == 0
    wide = capsys.readouterr().out
    assert wide.startswith(table.split("\nHeld devices:")[0])  # the normal table first, unchanged
    header, *rows = wide.split("\nDevices:\n")[1].split("\n\n")[0].splitlines()
    assert header.split() == ["NODE", "POOL", "DRIVER", "DEVICE", "KIND", "MEMORY", "STATE", "CLAIMS", "PODS", "WHY"]
    memory = fleet.slices[0]["spec"]["devices"][0]["capacity"]["memory"]["value"]
    cells = {tuple(row.split()[:2]) + (row.split()[3],): row.split() for row in rows}
    assert cells[("node-1", "node-1", "gpu-0")][-5:] == [memory, "allocated", "web/c", "web-0(Pending)", "-"]
    assert cells[("node-0", "node-0", "gpu-0")][-4:] == ["tainted", "-", "-", f"{NV}/xid=79:NoSchedule"]
    assert len(rows) == len(fleet.slices[0]["spec"]["devices"]) + len(fleet.slices[1]["spec"]["devices"])
    assert main(["fleet", "--fleet", str(path), "-o", "json", "--node", "node-1"]) == 0
    assert json.loads(capsys.readouterr().out)["devices"][0]["memory"] == memory


def test_class_from_the_fleet_whose_selector_fails_matches_nothing_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = fleets.simulated("l4", 1)
    broken = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "broken.example.com"},
        "spec": {"selectors": [{"cel": {"expression": f'device.attributes["{NV}"].noSuchAttribute == "x"'}}]},
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all([*fleet.slices, broken]))
    assert main(["fleet", "broken.example.com", "--fleet", str(path), "-o", "json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["devices"] == [] and "CEL error on 1 devices" in view["notes"][0]


def _jointly_allocatable(fleet: fleets.Fleet, free: list[str]) -> bool:
    """Whether every named device fits the pool's shared counters at the same time."""
    from decimal import Decimal

    from dra_driver.allocator import build_pools

    (pool,) = build_pools(fleet.slices)
    taken: dict[tuple[str, str], Decimal] = {}
    for device in (d for d in pool.devices if d.id.device in free):
        for set_name, counters in device.consumes:
            for counter, amount in counters:
                taken[(set_name, counter)] = taken.get((set_name, counter), Decimal(0)) + amount
    return all(amount <= pool.counter_sets[s][c] for (s, c), amount in taken.items())


def test_overlapping_placements_are_not_all_free(tmp_path: Path) -> None:
    """Dynamic partitioning publishes a GPU and every MIG placement on the same counters: before anything is
    allocated they are alternatives, so free counts what can be allocated together now, not every placement."""
    fleet = fleets.simulated("dgx-h100", 1, "dynamic")
    view = build_view(fleet, Filters())
    free = [d.device for d in view.devices if d.state == "free"]
    assert sorted(free) == [f"gpu-{i}" for i in range(8)]  # one whole GPU each, not 208 devices
    assert {d.state for d in view.devices if d.device not in free} == {"overlapping"}
    assert _jointly_allocatable(fleet, free)

    fleet_file = tmp_path / "fleet.json"
    fleet_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": fleet.slices}))
    fleet.claims = [allocated(fleet_file, tmp_path, mig_claim("1g.10gb"))]
    view = build_view(fleet, Filters())
    free = [d.device for d in view.devices if d.state == "free"]
    gpu = next(d for d in view.devices if d.state == "allocated").device.split("-mig-")[0]
    on_gpu = [name for name in free if name.startswith(f"{gpu}-mig-")]
    assert on_gpu and gpu not in free  # the rest of the partly used GPU, as placements that fit beside the held one
    assert _jointly_allocatable(fleet, free)
    assert sum(g.total for g in view.groups) == 208 == sum(sum(g.counts.values()) for g in view.groups)


def test_a_class_packs_its_own_devices(capsys: pytest.CaptureFixture[str]) -> None:
    """fleet CLASS: the free devices of that class are those allocatable together: seven 1g.10gb per H100."""
    assert main(["fleet", "--profile", "dgx-h100", "--partitioning", "dynamic", "mig-1g.10gb.nvidia.com", "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    states = [d["state"] for d in data["devices"]]
    assert states.count("free") == 8 * 7 and set(states) <= {"free", "overlapping"}


def _node_file(path: Path, slices: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": slices}))
    return path


def test_the_same_node_in_two_files_counts_once_or_blocked_and_the_notes_name_both_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slices = fleets.simulated("dgx-h100", 1).slices
    first = _node_file(tmp_path / "a.yaml", slices)
    second = _node_file(tmp_path / "b.yaml", slices)
    assert main(["fleet", "--fleet", str(first), "--fleet", str(second), "-o", "json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert len(view["devices"]) == 8 and all(d["state"] == "free" for d in view["devices"])  # one object, given twice
    (note,) = view["notes"]
    assert f"is in {first} and {second}: the same object given twice, read once" in note
    # The same pool under another slice name (a dump's generated name): the scheduler would refuse the pool.
    renamed = copy.deepcopy(slices)
    for index, item in enumerate(renamed):
        item["metadata"]["name"] = f"node-0-gpu-dump-{index}"
    _node_file(second, renamed)
    assert main(["fleet", "--fleet", str(first), "--fleet", str(second)]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0]
    assert "0 free" in header and "16 blocked" in header, header
    (note,) = [line for line in out.splitlines() if line.startswith("Note:")]
    assert "is unusable" in note and f"its slices come from {first} and {second}" in note and "count as blocked" in note


def gpu(name: str, attributes: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "attributes": attributes, "capacity": {"memory": {"value": "80Gi"}}}


def fleet_file(tmp: Path, devices: list[dict[str, Any]]) -> Path:
    slices = [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"n{i}-gpu"},
               "spec": {"driver": NV, "nodeName": f"n{i}", "pool": {"name": f"n{i}", "generation": 1, "resourceSliceCount": 1}, "devices": [device]}}
              for i, device in enumerate(devices)]  # fmt: skip
    path = tmp / "fleet.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": slices}))
    return path


def test_repeated_device_values_are_read_as_one_object(tmp_path: Path) -> None:
    model = {"productName": {"string": "NVIDIA H100 80GB HBM3"}, "index": {"int": 0}}
    fleet = fleets.load_paths([fleet_file(tmp_path, [gpu("gpu-0", model), gpu("gpu-0", model)])])
    first, second = (obj["spec"]["devices"][0] for obj in fleet.slices)
    assert first["attributes"]["productName"] is second["attributes"]["productName"]
    assert first["capacity"]["memory"] is second["capacity"]["memory"]
    pools = build_pools(fleet.slices)
    one, two = (pool.devices[0].attributes for pool in pools)
    assert one[f"{NV}/index"] is two[f"{NV}/index"] and one[f"{NV}/index"] == ("int", 0)


def test_a_value_of_another_type_is_not_shared_and_is_still_rejected(tmp_path: Path) -> None:
    """{"int": true} equals {"int": 1} in Python: shared, validation would miss it (or blame the good slice)."""
    path = fleet_file(tmp_path, [gpu("gpu-0", {"index": {"int": 1}}), gpu("gpu-0", {"index": {"int": True}})])
    fleet = fleets.load_paths([path])
    assert [obj["spec"]["devices"][0]["attributes"]["index"]["int"] for obj in fleet.slices] == [1, True]
    assert type(fleet.slices[1]["spec"]["devices"][0]["attributes"]["index"]["int"]) is bool
    with pytest.raises(ValidationError, match="n1-gpu"):
        fleets.check_slices(fleet.slices)


def test_malformed_values_are_left_as_read(tmp_path: Path) -> None:
    """Not a one-member map of a scalar (a string, two members, a list inside): kept as sent, for validation to name."""
    odd = {"a": "bare", "b": {"int": 1, "string": "x"}, "c": {"string": ["x"]}, "d": {}}
    fleet = fleets.load_paths([fleet_file(tmp_path, [gpu("gpu-0", dict(odd)), gpu("gpu-0", dict(odd))])])
    first, second = (obj["spec"]["devices"][0]["attributes"] for obj in fleet.slices)
    assert first == second == odd and all(first[key] is not second[key] for key in ("b", "c", "d"))
