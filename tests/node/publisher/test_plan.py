"""Generation and matching rules of the planner, on plain dicts."""

from __future__ import annotations

import copy
from typing import Any

from dra_driver.common.backoff import Backoff
from dra_driver.node.publisher.plan import carry_taint_times, dropped_fields, plan_pool, same_spec

POOL = "node-a"


def spec(*names: str) -> dict[str, Any]:
    return {
        "driver": "gpu.example.com",
        "nodeName": POOL,
        "pool": {"name": POOL, "generation": 0, "resourceSliceCount": 1},
        "devices": [{"name": n} for n in names],
    }


def stored(name: str, spec_: dict[str, Any], generation: int, count: int) -> dict[str, Any]:
    obj = {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1"}, "spec": copy.deepcopy(spec_)}
    obj["spec"]["pool"] = {"name": POOL, "generation": generation, "resourceSliceCount": count}
    return obj


def test_first_publish_creates_every_slice_at_generation_zero() -> None:
    plan = plan_pool([spec("a"), spec("b")], [], POOL)
    assert plan.generation == 0 and len(plan.creates) == 2 and not plan.updates and not plan.deletes
    assert {s["pool"]["resourceSliceCount"] for s in plan.creates} == {2}


def test_unchanged_pool_needs_no_write() -> None:
    existing = [stored("s1", spec("a"), 3, 2), stored("s2", spec("b"), 3, 2)]
    assert plan_pool([spec("a"), spec("b")], existing, POOL).writes == 0


def test_one_changed_slice_is_updated_in_place_without_a_bump() -> None:
    existing = [stored("s1", spec("a"), 3, 2), stored("s2", spec("b"), 3, 2)]
    changed = spec("b")
    changed["devices"][0]["attributes"] = {"model": {"string": "H200"}}
    plan = plan_pool([spec("a"), changed], existing, POOL)
    assert plan.generation == 3 and not plan.bumped
    assert [(obj["metadata"]["name"], s["pool"]["generation"]) for obj, s in plan.updates] == [("s2", 3)]


def test_two_changed_slices_bump_the_generation_everywhere() -> None:
    existing = [stored("s1", spec("a"), 3, 2), stored("s2", spec("b"), 3, 2)]
    a, b = spec("a"), spec("b")
    a["devices"][0]["attributes"] = {"x": {"int": 1}}
    b["devices"][0]["attributes"] = {"x": {"int": 1}}
    plan = plan_pool([a, b], existing, POOL)
    assert plan.bumped and plan.generation == 4
    assert {s["pool"]["generation"] for _, s in plan.updates} == {4}


def test_added_slice_bumps_and_updates_the_count_in_every_slice() -> None:
    existing = [stored("s1", spec("a"), 0, 1)]
    plan = plan_pool([spec("a"), spec("b")], existing, POOL)
    assert plan.bumped and plan.generation == 1
    assert [s["pool"]["resourceSliceCount"] for _, s in plan.updates] == [2]
    assert [s["devices"][0]["name"] for s in plan.creates] == ["b"]


def test_removed_slice_is_deleted_and_the_pool_bumped() -> None:
    existing = [stored("s1", spec("a"), 2, 2), stored("s2", spec("b"), 2, 2)]
    plan = plan_pool([spec("a")], existing, POOL)
    assert [o["metadata"]["name"] for o in plan.deletes] == ["s2"]
    assert plan.generation == 3 and [s["pool"]["resourceSliceCount"] for _, s in plan.updates] == [1]


def test_matching_by_overlap_keeps_a_withdrawn_device_to_one_write() -> None:
    existing = [stored("s1", spec("a", "b"), 1, 2), stored("s2", spec("c", "d"), 1, 2)]
    plan = plan_pool([spec("a", "b"), spec("c")], existing, POOL)
    assert not plan.bumped and [o["metadata"]["name"] for o, _ in plan.updates] == ["s2"]


def test_slices_of_another_pool_and_stale_duplicates_are_obsolete() -> None:
    other_pool = stored("old", spec("z"), 9, 1)
    other_pool["spec"]["pool"]["name"] = "renamed"
    duplicate_old = stored("dup", spec("a"), 1, 1)
    current = stored("cur", spec("a"), 2, 1)
    plan = plan_pool([spec("a")], [other_pool, duplicate_old, current], POOL)
    assert {o["metadata"]["name"] for o in plan.deletes} == {"old", "dup"}
    assert [o["metadata"]["name"] for o, _ in plan.updates] == ["cur"]


def test_republish_after_wipe_continues_above_the_last_generation() -> None:
    plan = plan_pool([spec("a")], [], POOL, last_generation=5)
    assert plan.generation == 6 and len(plan.creates) == 1


def test_server_side_defaults_are_not_changes() -> None:
    sent = spec("a")
    sent["devices"][0]["capacity"] = {"memory": {"value": "1024Mi"}}
    sent["devices"][0]["taints"] = [{"key": "k.io/x", "effect": "NoSchedule"}]
    sent["sharedCounters"] = []
    back = copy.deepcopy(sent)
    back.pop("sharedCounters")
    back["devices"][0]["capacity"]["memory"]["value"] = "1Gi"
    back["devices"][0]["taints"][0]["timeAdded"] = "2026-01-01T00:00:00Z"
    assert same_spec(sent, back)
    back["devices"][0]["capacity"]["memory"]["value"] = "2Gi"
    assert not same_spec(sent, back)


def test_taint_times_are_carried_over_on_update() -> None:
    old = spec("a")
    old["devices"][0]["taints"] = [{"key": "k.io/x", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}]
    new = spec("a")
    new["devices"][0]["taints"] = [{"key": "k.io/x", "effect": "NoSchedule"}, {"key": "k.io/y", "effect": "NoSchedule"}]
    carried = carry_taint_times(new, old)
    assert [t.get("timeAdded") for t in carried["devices"][0]["taints"]] == ["2026-01-01T00:00:00Z", None]


def test_dropped_fields_detection() -> None:
    sent = spec("a")
    sent["devices"][0]["consumesCounters"] = [{"counterSet": "c", "counters": {"m": {"value": "1"}}}]
    sent["devices"][0]["taints"] = [{"key": "k.io/x", "effect": "NoSchedule"}]
    assert dropped_fields(sent, spec("a")).partitioning and dropped_fields(sent, spec("a")).taints
    assert not dropped_fields(sent, sent)


def test_backoff_grows_is_capped_and_honours_retry_after() -> None:
    backoff = Backoff(initial=1.0, factor=2.0, cap=8.0, jitter=0.2)
    delays = [backoff.next_delay() for _ in range(6)]
    for delay, base in zip(delays, [1, 2, 4, 8, 8, 8]):
        assert base <= delay <= base * 1.2
    assert backoff.next_delay(retry_after=30) == 30
    backoff.reset()
    assert backoff.next_delay() <= 1.2
