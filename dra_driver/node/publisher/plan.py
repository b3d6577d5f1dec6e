"""Desired-vs-actual planning for one pool: which slices to create, update and delete, at which generation.

Pure functions over wire dicts, so the rules are tested without a server.

Rules (resource/v1 types.go, the reference resourceslice controller):
- existing slices are matched to desired ones by their device names (or
  counter-set names): first the same set, then the largest overlap;
- nothing differs: no write;
- exactly one matched slice differs and nothing is added or removed: update
  it in place, generation unchanged (consumers see a consistent pool before
  and after that single write);
- anything else: bump `pool.generation` and write it into every slice, create
  the missing ones, delete the obsolete ones (consumers ignore the old
  generation, and see the pool as incomplete until `resourceSliceCount`
  slices of the new generation exist).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Any

from dra_driver.model import quantity

JsonObject = dict[str, Any]


# --------------------------------------------------------------------------- comparison


@lru_cache(maxsize=4096)
def _quantity_value(text: str) -> Decimal | str:
    # Inventories repeat the same few quantities; parsing each one once keeps a resync cheap.
    return quantity.parse(text) if quantity.is_quantity(text) else text


def _normalize(value: Any, key: str = "") -> Any:
    """Drop empty members and server-filled taint times; compare quantities by value.

    The API server omits empty lists/maps, fills `timeAdded` and may
    canonicalize quantities ("1024Mi" -> "1Gi"); none of these is a change.
    """
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if k == "timeAdded":
                continue
            if k == "value" and isinstance(v, str):
                out[k] = _quantity_value(v)
                continue
            normalized = _normalize(v, k)
            if normalized in (None, [], {}):
                continue
            out[k] = normalized
        return out
    if isinstance(value, list):
        return [_normalize(v, key) for v in value]
    return value


def same_spec(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return bool(_normalize(a) == _normalize(b))


def slice_names(spec: Mapping[str, Any]) -> tuple[str, frozenset[str]]:
    """What identifies a slice's content: ("devices", names) or ("counters", counter-set names)."""
    if spec.get("sharedCounters"):
        return "counters", frozenset(str(c.get("name")) for c in spec["sharedCounters"])
    return "devices", frozenset(str(d.get("name")) for d in spec.get("devices") or [])


def generation_of(obj: Mapping[str, Any]) -> int:
    return int(((obj.get("spec") or {}).get("pool") or {}).get("generation") or 0)


def pool_name_of(obj: Mapping[str, Any]) -> str:
    return str(((obj.get("spec") or {}).get("pool") or {}).get("name") or "")


def with_pool(spec: Mapping[str, Any], generation: int, count: int) -> JsonObject:
    """A shallow copy with the pool's generation and count set (nested members are shared, never mutated)."""
    out = dict(spec)
    out["pool"] = {**out.get("pool", {}), "generation": generation, "resourceSliceCount": count}
    return out


# --------------------------------------------------------------------------- dropped fields


def uses_partitioning(spec: Mapping[str, Any]) -> bool:
    return bool(spec.get("sharedCounters")) or any(d.get("consumesCounters") for d in spec.get("devices") or [])


def uses_consumable(spec: Mapping[str, Any]) -> bool:
    return any(d.get("allowMultipleAllocations") for d in spec.get("devices") or [])


def uses_taints(spec: Mapping[str, Any]) -> bool:
    return any(d.get("taints") for d in spec.get("devices") or [])


@dataclass(frozen=True)
class DroppedFields:
    partitioning: bool = False
    taints: bool = False
    consumable: bool = False

    def __bool__(self) -> bool:
        return self.partitioning or self.taints or self.consumable


def dropped_fields(sent: Mapping[str, Any], stored: Mapping[str, Any]) -> DroppedFields:
    """Fields the API server silently dropped (their feature gate is off)."""
    return DroppedFields(
        partitioning=uses_partitioning(sent) and not uses_partitioning(stored),
        taints=uses_taints(sent) and not uses_taints(stored),
        consumable=uses_consumable(sent) and not uses_consumable(stored),
    )


# --------------------------------------------------------------------------- planning


@dataclass
class Plan:
    generation: int
    slice_count: int
    updates: list[tuple[JsonObject, JsonObject]] = field(default_factory=list)  # (existing object, new spec)
    creates: list[JsonObject] = field(default_factory=list)  # new specs
    deletes: list[JsonObject] = field(default_factory=list)  # existing objects
    bumped: bool = False

    @property
    def writes(self) -> int:
        return len(self.updates) + len(self.creates) + len(self.deletes)


def _match(desired: Sequence[JsonObject], existing: Sequence[JsonObject]) -> tuple[dict[int, JsonObject], list[JsonObject]]:
    """Pair desired specs (by index) with existing slices; return the pairs and the unpaired slices."""
    # Newest generation first, so a stale duplicate loses against a current slice.
    remaining = sorted(existing, key=lambda o: (-generation_of(o), str(o["metadata"].get("name"))))
    keys = [slice_names(spec) for spec in desired]
    pairs: dict[int, JsonObject] = {}
    for index, key in enumerate(keys):
        for obj in remaining:
            if slice_names(obj.get("spec") or {}) == key:
                pairs[index] = obj
                remaining.remove(obj)
                break
    for index, (kind, names) in enumerate(keys):
        if index in pairs:
            continue
        best, overlap = None, 0
        for obj in remaining:
            other_kind, other_names = slice_names(obj.get("spec") or {})
            shared = len(names & other_names)
            if other_kind == kind and shared > overlap:
                best, overlap = obj, shared
        if best is not None:
            pairs[index] = best
            remaining.remove(best)
    return pairs, remaining


def plan_pool(
    desired: Sequence[JsonObject],
    existing: Sequence[JsonObject],
    pool_name: str,
    last_generation: int | None = None,
) -> Plan:
    """What to write so that `existing` (this node's and driver's slices) becomes `desired`.

    `last_generation` is the generation this publisher last wrote; after the
    slices were wiped, the pool comes back with a higher one.
    """
    ours = [o for o in existing if pool_name_of(o) == pool_name]
    foreign_pools = [o for o in existing if pool_name_of(o) != pool_name]
    if ours:
        current = max(generation_of(o) for o in ours)
    else:
        current = last_generation if last_generation is not None else -1
    count = len(desired)
    pairs, unpaired = _match(desired, ours)
    obsolete = [*unpaired, *foreign_pools]
    changed = [i for i in range(count) if i not in pairs or not same_spec(pairs[i]["spec"], with_pool(desired[i], current, count))]

    if not changed and not obsolete:
        return Plan(current, count)
    if len(changed) == 1 and changed[0] in pairs and not obsolete and current >= 0:
        index = changed[0]
        return Plan(current, count, updates=[(pairs[index], with_pool(desired[index], current, count))])
    generation = current + 1
    plan = Plan(generation, count, bumped=True, deletes=obsolete)
    for index, spec in enumerate(desired):
        new_spec = with_pool(spec, generation, count)
        if index in pairs:
            plan.updates.append((pairs[index], new_spec))
        else:
            plan.creates.append(new_spec)
    return plan


def carry_taint_times(new_spec: JsonObject, existing_spec: Mapping[str, Any]) -> JsonObject:
    """A copy of new_spec keeping the server-set `timeAdded` of taints that stay, so an update does not reset them."""
    new_spec = copy.deepcopy(new_spec)
    times: dict[tuple[str, str, str, str], str] = {}
    for device in existing_spec.get("devices") or []:
        for taint in device.get("taints") or []:
            if taint.get("timeAdded"):
                times[(device.get("name"), taint.get("key"), taint.get("value", ""), taint.get("effect"))] = taint["timeAdded"]
    for device in new_spec.get("devices") or []:
        for taint in device.get("taints") or []:
            key = (device.get("name"), taint.get("key"), taint.get("value", ""), taint.get("effect"))
            if not taint.get("timeAdded") and key in times:
                taint["timeAdded"] = times[key]
    return new_spec


__all__ = [
    "DroppedFields",
    "Plan",
    "carry_taint_times",
    "dropped_fields",
    "plan_pool",
    "same_spec",
    "slice_names",
]
