"""Structured allocation semantics, with the real CEL layer (dra-api-facts.md 3.3-3.7, 4.1)."""

from __future__ import annotations

import random

import alloc_builders as b
from dra_driver.allocator import DeviceID

NV = b.NV


def four_gpus(node: str = "node-a", **extra: object) -> dict:
    return b.resource_slice(node, [b.device(f"gpu-{i}", **extra) for i in range(4)])


def test_exact_count_takes_first_devices_in_order() -> None:
    ex = b.allocate([four_gpus()], [b.claim_doc([b.exact("gpu", count=2)])])
    assert ex.allocatable
    assert b.chosen_devices(ex) == [("gpu", "node-a/gpu-0"), ("gpu", "node-a/gpu-1")]


def test_count_defaults_to_one_and_too_many_is_not_allocatable() -> None:
    ok = b.allocate([four_gpus()], [b.claim_doc([b.exact("gpu")])])
    assert len(b.chosen_devices(ok)) == 1
    ex = b.allocate([four_gpus()], [b.claim_doc([b.exact("gpu", count=5)])])
    assert not ex.allocatable and ex.error is None
    assert any("needs 5, 4 usable" in r for r in ex.nodes[0].reasons)


def test_all_mode_takes_every_matching_device() -> None:
    devices = [b.device("gpu-0"), b.device("mig-0", type_="mig"), b.device("gpu-1")]
    ex = b.allocate(
        [b.resource_slice("node-a", devices)], [b.claim_doc([{"name": "all", "exactly": {"deviceClassName": b.GPU_CLASS, "allocationMode": "All"}}])]
    )
    assert b.chosen_devices(ex) == [("all", "node-a/gpu-0"), ("all", "node-a/gpu-1")]


def test_all_mode_fails_when_one_matching_device_is_taken() -> None:
    held = {DeviceID(NV, "node-a", "gpu-1"): "default/other"}
    ex = b.allocate(
        [four_gpus()], [b.claim_doc([{"name": "all", "exactly": {"deviceClassName": b.GPU_CLASS, "allocationMode": "All"}}])], allocated=held
    )
    assert not ex.allocatable


def test_all_mode_refuses_incomplete_pool_with_an_error() -> None:
    partial = b.resource_slice("node-a", [b.device("gpu-0")], count=2)
    ex = b.allocate([partial], [b.claim_doc([{"name": "all", "exactly": {"deviceClassName": b.GPU_CLASS, "allocationMode": "All"}}])])
    assert not ex.allocatable
    assert ex.error and "currently being updated" in ex.error


def test_exact_count_skips_incomplete_pool_and_says_so() -> None:
    partial = b.resource_slice("node-a", [b.device("gpu-0")], count=2)
    ex = b.allocate([partial], [b.claim_doc([b.exact("gpu")])])
    assert not ex.allocatable and ex.error is None
    why = b.rejection(ex, "gpu", "node-a", "gpu-0")
    assert why.code == "pool" and "incomplete" in why.summary


def test_only_highest_generation_counts() -> None:
    old = b.resource_slice("node-a", [b.device("gpu-old")], generation=1, name="old")
    new = b.resource_slice("node-a", [b.device("gpu-new")], generation=2, name="new")
    ex = b.allocate([old, new], [b.claim_doc([b.exact("gpu")])])
    assert b.chosen_devices(ex) == [("gpu", "node-a/gpu-new")]
    matched = ex.alternatives[0].nodes["node-a"].matched
    assert [d.device for d in matched] == ["gpu-new"]


def test_duplicate_device_names_invalidate_the_pool() -> None:
    one = b.resource_slice("node-a", [b.device("gpu-0")], count=2, name="s1")
    two = b.resource_slice("node-a", [b.device("gpu-0")], count=2, name="s2")
    ex = b.allocate([one, two], [b.claim_doc([b.exact("gpu")])])
    assert not ex.allocatable
    why = b.rejection(ex, "gpu", "node-a", "gpu-0")
    assert why.code == "pool" and "appears twice" in why.summary


def test_class_selector_then_request_selector_reasons() -> None:
    devices = [b.device("mig-0", type_="mig"), b.device("small", memory="40Gi"), b.device("big")]
    selector = f'device.capacity["{NV}"].memory.compareTo(quantity("80Gi")) >= 0'
    ex = b.allocate([b.resource_slice("node-a", devices)], [b.claim_doc([b.exact("gpu", selectors=(selector,))])])
    assert b.chosen_devices(ex) == [("gpu", "node-a/big")]
    by_class = b.rejection(ex, "gpu", "node-a", "mig-0")
    assert by_class.code == "selector" and "class gpu.nvidia.com selector #0" in by_class.summary
    assert "gpu.nvidia.com/type='mig'" in by_class.detail
    by_request = b.rejection(ex, "gpu", "node-a", "small")
    assert by_request.code == "selector" and "request selector #0" in by_request.summary
    assert "memory=40Gi" in by_request.detail


def test_selectors_stop_at_first_false() -> None:
    # Selector #1 would fail at runtime on every device, but #0 is false first.
    devices = [b.device("gpu-0")]
    ex = b.allocate(
        [b.resource_slice("node-a", devices)], [b.claim_doc([b.exact("gpu", selectors=("false", f'device.attributes["{NV}"].nosuch == 1'))])]
    )
    assert ex.error is None
    assert "request selector #0" in b.rejection(ex, "gpu", "node-a", "gpu-0").summary


def test_cel_runtime_error_makes_the_claim_unallocatable_not_no_match() -> None:
    expression = f'device.attributes["{NV}"].nvlinkDomain == "x"'  # attribute missing: runtime error
    ex = b.allocate([four_gpus()], [b.claim_doc([b.exact("gpu", selectors=(expression,))])])
    assert not ex.allocatable
    assert ex.error and "CEL runtime error" in ex.error and "request selector #0" in ex.error
    assert b.rejection(ex, "gpu", "node-a", "gpu-0").code == "cel-error"


def test_guarded_selector_is_plain_no_match() -> None:
    expression = f'"nvlinkDomain" in device.attributes["{NV}"] && device.attributes["{NV}"].nvlinkDomain == "x"'
    ex = b.allocate([four_gpus()], [b.claim_doc([b.exact("gpu", selectors=(expression,))])])
    assert not ex.allocatable and ex.error is None


def test_first_available_falls_back_to_mig_subrequest() -> None:
    devices = [b.device("gpu-0"), b.device("gpu-0-mig-1g10gb-19-0", type_="mig", memory="10Gi")]
    held = {DeviceID(NV, "node-a", "gpu-0"): "default/training"}
    request = {"name": "accel", "firstAvailable": [b.sub("full", b.GPU_CLASS), b.sub("slice", b.MIG_CLASS)]}
    ex = b.allocate([b.resource_slice("node-a", devices)], [b.claim_doc([request])], allocated=held)
    assert b.chosen_devices(ex) == [("accel/slice", "node-a/gpu-0-mig-1g10gb-19-0")]
    assert b.rejection(ex, "accel/full", "node-a", "gpu-0").detail == "held by default/training"
    # Without the other claim the first subrequest wins.
    free = b.allocate([b.resource_slice("node-a", devices)], [b.claim_doc([request])])
    assert b.chosen_devices(free) == [("accel/full", "node-a/gpu-0")]


def test_match_attribute_on_nvlink_domain() -> None:
    key = "nvlink_dot_example_dot_com__domain"
    devices = [b.device("gpu-0", **{key: "a"}), b.device("gpu-1", **{key: "b"}), b.device("gpu-2", **{key: "b"}), b.device("gpu-3")]
    constraint = [{"matchAttribute": "nvlink.example.com/domain"}]
    ex = b.allocate([b.resource_slice("node-a", devices)], [b.claim_doc([b.exact("gpu", count=2)], constraint)])
    assert b.chosen_devices(ex) == [("gpu", "node-a/gpu-1"), ("gpu", "node-a/gpu-2")]
    three = b.allocate([b.resource_slice("node-a", devices)], [b.claim_doc([b.exact("gpu", count=3)], constraint)])
    assert not three.allocatable
    text = "\n".join(three.nodes[0].reasons)
    assert "no combination" in text and "differs" in text and "does not have this attribute" in text


def test_match_attribute_across_two_requests_and_types_must_agree() -> None:
    devices = [b.device("gpu-0", clique=1), b.device("gpu-1", clique="1"), b.device("gpu-2", clique=1)]
    requests = [b.exact("first"), b.exact("second")]
    ex = b.allocate(
        [b.resource_slice("node-a", devices)], [b.claim_doc(requests, [{"requests": ["first", "second"], "matchAttribute": f"{NV}/clique"}])]
    )
    # gpu-1 has the string "1", not the int 1: different type, so it cannot join gpu-0.
    assert b.chosen_devices(ex) == [("first", "node-a/gpu-0"), ("second", "node-a/gpu-2")]


def counter_fleet() -> list[dict]:
    counters = [{"name": "gpu-0-counter-set", "counters": {"memory-slice": {"value": "8"}}}]
    devices = [
        {
            "name": "gpu-0",
            "attributes": {"type": {"string": "gpu"}},
            "consumesCounters": [{"counterSet": "gpu-0-counter-set", "counters": {"memory-slice": {"value": "8"}}}],
        },
    ] + [
        {
            "name": f"gpu-0-mig-4g-{i}",
            "attributes": {"type": {"string": "mig"}},
            "consumesCounters": [{"counterSet": "gpu-0-counter-set", "counters": {"memory-slice": {"value": "4"}}}],
        }
        for i in range(3)
    ]
    return [
        b.resource_slice("node-a", counters=counters, count=2, name="a-counters"),
        b.resource_slice("node-a", devices, count=2, name="a-devices"),
    ]


def test_shared_counters_prevent_over_allocation() -> None:
    two = b.allocate(counter_fleet(), [b.claim_doc([b.exact("mig", b.MIG_CLASS, count=2)])])
    assert [d for _, d in b.chosen_devices(two)] == ["node-a/gpu-0-mig-4g-0", "node-a/gpu-0-mig-4g-1"]
    three = b.allocate(counter_fleet(), [b.claim_doc([b.exact("mig", b.MIG_CLASS, count=3)])])
    assert not three.allocatable
    assert any("memory-slice needs 4, 0 left" in r for r in three.nodes[0].reasons)


def test_counters_consumed_by_allocated_devices_count() -> None:
    held = {DeviceID(NV, "node-a", "gpu-0-mig-4g-2"): "default/other"}
    ex = b.allocate(counter_fleet(), [b.claim_doc([b.exact("gpu")])], allocated=held)
    assert not ex.allocatable
    why = b.rejection(ex, "gpu", "node-a", "gpu-0")
    assert why.code == "counters" and "needs 8, 4 left" in why.detail


def test_whole_gpu_and_mig_together_exceed_counters() -> None:
    ex = b.allocate(counter_fleet(), [b.claim_doc([b.exact("gpu"), b.exact("mig", b.MIG_CLASS)])])
    assert not ex.allocatable


def test_admin_access_uses_allocated_device_and_is_marked() -> None:
    held = {DeviceID(NV, "node-a", f"gpu-{i}"): "default/other" for i in range(4)}
    ex = b.allocate([four_gpus()], [b.claim_doc([b.exact("gpu", adminAccess=True)])], allocated=held)
    assert ex.allocatable
    result = ex.chosen.allocations["default/claim"]["devices"]["results"][0]
    assert result["adminAccess"] is True and result["device"] == "gpu-0"
    plain = b.allocate([four_gpus()], [b.claim_doc([b.exact("gpu")])], allocated=held)
    assert not plain.allocatable
    assert b.rejection(plain, "gpu", "node-a", "gpu-0").code == "allocated"


def tainted(effect: str) -> dict:
    gpu = b.device("gpu-0")
    gpu["taints"] = [{"key": "example.com/unhealthy", "value": "ecc", "effect": effect}]
    return b.resource_slice("node-a", [gpu])


def test_no_schedule_taint_excludes_unless_tolerated() -> None:
    ex = b.allocate([tainted("NoSchedule")], [b.claim_doc([b.exact("gpu")])])
    assert not ex.allocatable
    assert "example.com/unhealthy=ecc:NoSchedule" in b.rejection(ex, "gpu", "node-a", "gpu-0").summary
    toleration = [{"key": "example.com/unhealthy", "operator": "Exists"}]
    ok = b.allocate([tainted("NoExecute")], [b.claim_doc([b.exact("gpu", tolerations=toleration)])])
    assert ok.allocatable
    assert ok.chosen.allocations["default/claim"]["devices"]["results"][0]["tolerations"] == [{"key": "example.com/unhealthy", "operator": "Exists"}]
    wrong_value = [{"key": "example.com/unhealthy", "value": "other"}]
    assert not b.allocate([tainted("NoSchedule")], [b.claim_doc([b.exact("gpu", tolerations=wrong_value)])]).allocatable


def test_taint_with_effect_none_is_ignored() -> None:
    assert b.allocate([tainted("None")], [b.claim_doc([b.exact("gpu")])]).allocatable


def test_one_node_at_a_time_and_all_nodes_pools_everywhere() -> None:
    local = [b.resource_slice(f"node-{n}", [b.device("gpu-0")]) for n in ("b", "a")]
    shared = b.resource_slice(None, [b.device("fabric-0", type_="gpu")], pool="fabric")
    # Two GPUs are never on one node, so count=2 needs the allNodes pool.
    ex = b.allocate(local + [shared], [b.claim_doc([b.exact("gpu", count=2)])])
    assert ex.chosen.node == "node-a"
    assert b.chosen_devices(ex) == [("gpu", "fabric/fabric-0"), ("gpu", "node-a/gpu-0")]
    selector = ex.chosen.allocations["default/claim"]["nodeSelector"]
    assert selector["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["node-a"]
    three = b.allocate(local + [shared], [b.claim_doc([b.exact("gpu", count=3)])])
    assert not three.allocatable


def test_node_selector_slices_use_node_labels() -> None:
    selected = b.resource_slice(None, [b.device("gpu-0")], pool="rack")
    del selected["spec"]["allNodes"]
    selected["spec"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-z"]}]}]}
    ex = b.allocate([selected, b.resource_slice("node-y", [])], [b.claim_doc([b.exact("gpu")])])
    assert ex.chosen.node == "node-z"


def test_allocation_is_deterministic_whatever_the_input_order() -> None:
    slices = [b.resource_slice(f"node-{n}", [b.device(f"gpu-{i}") for i in range(3)]) for n in range(4)]
    claim = [b.claim_doc([b.exact("gpu", count=2)])]
    first = b.chosen_devices(b.allocate(slices, claim))
    shuffled = list(slices)
    random.Random(7).shuffle(shuffled)
    assert b.chosen_devices(b.allocate(shuffled, claim)) == first == [("gpu", "node-0/gpu-0"), ("gpu", "node-0/gpu-1")]


def test_allocation_config_lists_class_configs_before_claim_configs() -> None:
    from dra_driver.allocator import Allocator, CelMatcher, DeviceClassSpec, Node, build_pools
    from dra_driver.model.resource_v1 import ResourceClaim
    from dra_driver.sources.claims import to_claim

    opaque = {"driver": NV, "parameters": {"apiVersion": "x/v1", "kind": "GpuConfig"}}
    doc = b.claim_doc([b.exact("gpu")], config=[{"requests": ["gpu"], "opaque": opaque}])
    spec = to_claim(ResourceClaim.model_validate(doc).spec, "claim", "default")
    known = {
        b.GPU_CLASS: DeviceClassSpec(b.GPU_CLASS, tuple(b.CLASS_SELECTORS[b.GPU_CLASS]), ({"driver": NV, "parameters": {"kind": "ClassConfig"}},))
    }
    ex = Allocator(build_pools([four_gpus()]), known, CelMatcher()).explain([spec], [Node("node-a")])
    config = ex.chosen.allocations["default/claim"]["devices"]["config"]
    assert [c["source"] for c in config] == ["FromClass", "FromClaim"]
    assert config[0]["requests"] == ["gpu"]


def test_device_in_use_by_other_request_of_same_claim_is_not_reused() -> None:
    ex = b.allocate([b.resource_slice("node-a", [b.device("gpu-0"), b.device("gpu-1")])], [b.claim_doc([b.exact("a"), b.exact("b"), b.exact("c")])])
    assert not ex.allocatable
    ok = b.allocate([b.resource_slice("node-a", [b.device("gpu-0"), b.device("gpu-1")])], [b.claim_doc([b.exact("a"), b.exact("b")])])
    assert b.chosen_devices(ok) == [("a", "node-a/gpu-0"), ("b", "node-a/gpu-1")]
