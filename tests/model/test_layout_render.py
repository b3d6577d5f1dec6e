from __future__ import annotations

import copy
import json

from dra_driver.model import CounterConsumption, CounterSet, Device, DeviceTaint, Inventory, Version, layout_pool, render_pool, validate_slices
from dra_driver.model.validation import MAX_DEVICES
from dra_driver.model.render import as_list, render_attribute
from tests.model.conftest import make_device


def test_attribute_union_members() -> None:
    assert render_attribute(True) == {"bool": True}
    assert render_attribute(7) == {"int": 7}
    assert render_attribute("x") == {"string": "x"}
    assert render_attribute(Version("1.2.3")) == {"version": "1.2.3"}


def test_plain_pool_is_one_slice_with_wire_fields(plain_inventory: Inventory) -> None:
    slices = render_pool(plain_inventory, node_name="node-a", generation=3)
    assert len(slices) == 1
    spec = slices[0]["spec"]
    assert slices[0]["apiVersion"] == "resource.k8s.io/v1"
    assert slices[0]["kind"] == "ResourceSlice"
    assert spec["nodeName"] == "node-a"
    assert spec["pool"] == {"name": "node-a", "generation": 3, "resourceSliceCount": 1}
    device = spec["devices"][0]
    assert device["capacity"] == {"memory": {"value": "81559Mi"}}
    assert device["attributes"]["driverVersion"] == {"version": "580.159.4"}
    assert "sharedCounters" not in spec
    validate_slices(slices)


def test_split_at_128_plain_devices() -> None:
    inventory = Inventory(driver="gpu.example.com", devices=[make_device(f"d-{i}") for i in range(300)])
    slices = render_pool(inventory, node_name="n")
    sizes = [len(s["spec"]["devices"]) for s in slices]
    assert sizes == [MAX_DEVICES, MAX_DEVICES, 300 - 2 * MAX_DEVICES]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {3}
    validate_slices(slices)


def test_counters_go_to_their_own_slices_and_devices_cap_at_64(partitioned_inventory: Inventory) -> None:
    slices = render_pool(partitioned_inventory, node_name="n")
    counter_slices = [s for s in slices if "sharedCounters" in s["spec"]]
    device_slices = [s for s in slices if "devices" in s["spec"]]
    # 10 counter sets -> 8 + 2; 10 groups of 7 consuming devices -> 9 groups (63) + 1 group (7):
    # a GPU's partitions never straddle two slices.
    assert [len(s["spec"]["sharedCounters"]) for s in counter_slices] == [8, 2]
    assert [len(s["spec"]["devices"]) for s in device_slices] == [63, 7]
    assert slices[:2] == counter_slices  # counters first
    assert all(not ("devices" in s["spec"] and "sharedCounters" in s["spec"]) for s in slices)
    validate_slices(slices)


def test_tainted_device_lowers_the_limit_of_its_slice() -> None:
    devices = [make_device(f"d-{i}") for i in range(100)]
    devices[70].taints = [DeviceTaint(key="example.com/unhealthy", effect="NoExecute")]
    slices = render_pool(Inventory(driver="gpu.example.com", devices=devices), node_name="n")
    # The 70 plain devices before it keep a 128-limit slice; the tainted one starts a 64-limit slice.
    assert [len(s["spec"]["devices"]) for s in slices] == [70, 30]
    assert any(d.get("taints") for d in slices[1]["spec"]["devices"])
    validate_slices(slices)


def test_plain_devices_after_a_tainted_one_respect_64() -> None:
    devices = [make_device(f"d-{i}") for i in range(100)]
    devices[0].taints = [DeviceTaint(key="example.com/unhealthy", effect="NoExecute")]
    slices = render_pool(Inventory(driver="gpu.example.com", devices=devices), node_name="n")
    assert [len(s["spec"]["devices"]) for s in slices] == [64, 36]
    validate_slices(slices)


def test_reserve_for_taints_keeps_slices_stable_when_a_taint_appears() -> None:
    devices = [make_device(f"d-{i}") for i in range(100)]
    before = layout_pool(Inventory("gpu.example.com", devices), reserve_for_taints=True)
    devices[10].taints = [DeviceTaint(key="example.com/unhealthy", effect="NoExecute")]
    after = layout_pool(Inventory("gpu.example.com", devices), reserve_for_taints=True)
    assert [[d.name for d in s.devices] for s in before] == [[d.name for d in s.devices] for s in after]


def test_empty_inventory_still_publishes_an_empty_pool() -> None:
    slices = render_pool(Inventory(driver="gpu.example.com"), node_name="n")
    assert len(slices) == 1 and slices[0]["spec"]["devices"] == []
    validate_slices(slices)


def test_layout_depends_only_on_content(partitioned_inventory: Inventory) -> None:
    rebuilt = Inventory(
        driver=partitioned_inventory.driver,
        devices=[copy.deepcopy(d) for d in partitioned_inventory.devices],
        counter_sets=list(reversed(list(reversed(partitioned_inventory.counter_sets)))),
    )
    first, second = render_pool(partitioned_inventory, "n"), render_pool(rebuilt, "n")
    assert json.dumps(first) == json.dumps(second)


def test_as_list_is_kubectl_style() -> None:
    listing = as_list([{"kind": "ResourceSlice"}])
    assert listing["apiVersion"] == "v1" and listing["kind"] == "List" and len(listing["items"]) == 1


def test_device_without_optional_fields_renders_minimal() -> None:
    assert render_pool(Inventory("gpu.example.com", [Device(name="d-0")]), "n")[0]["spec"]["devices"] == [{"name": "d-0"}]


def test_partitions_of_one_gpu_stay_in_one_slice(partitioned_inventory: Inventory) -> None:
    per_slice = [{d.consumes_counters[0].counter_set for d in c.devices} for c in layout_pool(partitioned_inventory) if c.devices]
    for i, sets_here in enumerate(per_slice):
        for j, other in enumerate(per_slice):
            if i != j:
                assert not sets_here & other


def test_a_group_larger_than_a_slice_is_split() -> None:
    devices = [
        make_device(f"d-{i}", consumes_counters=[CounterConsumption(counter_set="big", counters={"c": "1"})])
        for i in range(70)
    ]
    inventory = Inventory("gpu.example.com", devices, [CounterSet(name="big", counters={"c": "70"})])
    slices = render_pool(inventory, "n")
    assert [len(s["spec"]["devices"]) for s in slices if "devices" in s["spec"]] == [64, 6]
    validate_slices(slices)
