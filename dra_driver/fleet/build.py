"""A fleet (slices, claims, pods) -> FleetView: the state of every device and who holds it.

Claims and pods come from files or a cluster and are untrusted: a malformed entry
is skipped (and counted in the view's notes), never a crash. Slices go through
the allocator's pool grouping, so only each pool's newest generation counts, as
for the scheduler.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

from dra_driver.allocator import CelMatcher, DeviceClassSpec, DeviceID, Matcher, SelectorRuntimeError, build_pools
from dra_driver.allocator.capacity import shared_consumption
from dra_driver.allocator.gcpause import collector_paused
from dra_driver.allocator.types import Pool, PoolDevice
from dra_driver.sources.fleet import Fleet
from dra_driver.model import quantity
from dra_driver.fleet.model import NO_NODE, CapacityShare, CounterRow, DeviceRow, FleetView, GroupRow, Holder, PodRef, UnpublishedAllocation
from dra_driver.backend.vocabulary import PARTITION, device_vendor

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
# Attributes (in the driver's own domain) that name what a device is, best first; then what names a partition.
_KIND_ATTRIBUTES = ("productName", "model", "type")
_PARTITION_ATTRIBUTES = ("profile", "partitionProfile")


@dataclass(frozen=True)
class Filters:
    """Which devices to show; an empty tuple does not filter."""

    nodes: tuple[str, ...] = ()  # names or shell patterns (node-1*)
    vendors: tuple[str, ...] = ()  # dra-driver.io/vendor values: nvidia, amd, intel
    namespaces: tuple[str, ...] = ()  # devices held by a claim in one of these namespaces
    device_class: DeviceClassSpec | None = None  # devices the class's selectors match


def build_view(
    fleet: Fleet, filters: Filters, matcher: Matcher | None = None, pods_listed: bool = False, pools: Sequence[Pool] | None = None
) -> FleetView:
    """`pods_listed`: the fleet's pods are all the cluster has, so a reserved pod not among them is Missing;
    `pools`: the fleet's slices already grouped (build_pools), for a caller that needs them too."""
    with collector_paused():  # tens of thousands of rows, none cyclic
        return _build_view(fleet, filters, matcher, pods_listed, build_pools(fleet.slices) if pools is None else pools)


def _build_view(fleet: Fleet, filters: Filters, matcher: Matcher | None, pods_listed: bool, pools: Sequence[Pool]) -> FleetView:
    view = FleetView(sources=list(fleet.sources), device_class=filters.device_class.name if filters.device_class else None)
    view.notes += fleet.notes
    holders, skipped = _holders(fleet.claims, _pod_phases(fleet.pods) if (fleet.pods or pods_listed) else None)
    shares = shared_consumption(fleet.claims)
    if skipped:
        view.notes.append(f"{skipped} malformed allocation results or claims were skipped")
    published: set[DeviceID] = set()
    selects = _class_test(filters.device_class, matcher)
    selector_errors = 0
    for pool in pools:
        if pool.invalid:
            view.notes.append(
                f"pool {pool.driver}/{pool.name} is unusable: {pool.invalid}{_files_of(pool, fleet.slice_files)}; its devices count as blocked"
            )
        used = _counters_used(pool, holders)
        shown: list[tuple[PoolDevice, DeviceRow]] = []
        for device in pool.devices:
            published.add(device.id)
            row = _device_row(pool, device, holders.get(device.id, []), used, shares.get(device.id))
            if pool.invalid and row.state != "allocated":  # the scheduler allocates nothing from an unusable pool
                row.state, row.blocked_by = "blocked", "unusable pool"
            if not _wanted(row, filters):
                continue
            try:
                if not selects(device):
                    continue
            except SelectorRuntimeError:
                selector_errors += 1  # the scheduler would fail the claim: the device is not a match
                continue
            shown.append((device, row))
        if shown:
            _mark_overlapping(pool, shown, used)
            view.devices += [row for _, row in shown]
            view.counters += _counter_rows(pool, used)
    if selector_errors:
        view.notes.append(f"class {view.device_class}: its selectors failed with a CEL error on {selector_errors} devices (counted as not matching)")
    view.unpublished = [
        UnpublishedAllocation(device.driver, device.pool, device.device, holder)
        for device, device_holders in sorted(holders.items())
        if device not in published
        for holder in device_holders
        if not filters.namespaces or holder.namespace in filters.namespaces
    ]
    view.groups = _groups(view.devices)
    return view


def _files_of(pool: Pool, slice_files: Mapping[str, list[str]]) -> str:
    """Which files the pool's slices come from, when more than one (--fleet): where to look for the repeat."""
    files = sorted({file for name in pool.slices for file in slice_files.get(name, [])})
    return f"; its slices come from {' and '.join(files)}" if len(files) > 1 else ""


def _class_test(device_class: DeviceClassSpec | None, matcher: Matcher | None) -> Callable[[PoolDevice], bool]:
    """Whether the class selects a device (all its selectors true); every device passes without a class."""
    if device_class is None:
        return lambda device: True
    evaluator = matcher or CelMatcher()
    return lambda device: all(evaluator.evaluate(expression, device) for expression in device_class.selectors)


# -- holders --------------------------------------------------------------------------------------


def _pod_phases(pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    phases: dict[tuple[str, str], str] = {}
    for pod in pods:
        meta = pod.get("metadata") if isinstance(pod, Mapping) else None
        if isinstance(meta, Mapping):
            status = pod.get("status")
            phase = status.get("phase") if isinstance(status, Mapping) else None
            phases[(str(meta.get("namespace") or "default"), str(meta.get("name")))] = str(phase or "Unknown")
    return phases


def _reserved_pods(status: Mapping[str, Any], namespace: str, phases: Mapping[tuple[str, str], str] | None) -> tuple[PodRef, ...]:
    refs = status.get("reservedFor")
    out: list[PodRef] = []
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, Mapping) and ref.get("resource") == "pods" and not ref.get("apiGroup") and isinstance(ref.get("name"), str):
            phase = "" if phases is None else phases.get((namespace, ref["name"]), "Missing")
            out.append(PodRef(ref["name"], phase))
    return tuple(sorted(out, key=lambda p: p.name))


def _holders(claims: Iterable[Mapping[str, Any]], phases: Mapping[tuple[str, str], str] | None) -> tuple[dict[DeviceID, list[Holder]], int]:
    """Device -> the allocation results naming it, from each claim's status; and how many entries were malformed."""
    out: dict[DeviceID, list[Holder]] = {}
    skipped = 0
    for claim in claims:
        meta, status = claim.get("metadata"), claim.get("status")
        if not isinstance(meta, Mapping):
            skipped += 1
            continue
        if not isinstance(status, Mapping):  # not allocated yet
            continue
        allocation = status.get("allocation")
        devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
        results = devices.get("results") if isinstance(devices, Mapping) else None
        if not isinstance(results, list):
            continue
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        pods = _reserved_pods(status, namespace or "default", phases)
        for result in results:
            if not isinstance(result, Mapping) or not all(isinstance(result.get(k), str) for k in ("driver", "pool", "device")):
                skipped += 1
                continue
            device = DeviceID(result["driver"], result["pool"], result["device"])
            out.setdefault(device, []).append(Holder(namespace, name, str(result.get("request") or ""), result.get("adminAccess") is True, pods))
    return out, skipped


# -- devices --------------------------------------------------------------------------------------


def _node_of(pool: Pool, device: PoolDevice) -> str:
    target = device.target or pool.slice_targets.get(device.slice_name)
    return (target.node_name if target is not None else None) or NO_NODE


def _string(device: PoolDevice, name: str) -> str | None:
    value = device.attributes.get(name)
    return str(value[1]) if value is not None and value[0] == "string" else None


@lru_cache(maxsize=256)
def _kind_keys(driver: str) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    """The qualified names device_kind reads for a driver (the same few on every device)."""
    return tuple(f"{driver}/{a}" for a in _KIND_ATTRIBUTES), tuple(f"{driver}/{a}" for a in _PARTITION_ATTRIBUTES), f"{driver}/type"


def _first_string(device: PoolDevice, names: tuple[str, ...]) -> str | None:
    for name in names:
        value = _string(device, name)
        if value:
            return value
    return None


def device_kind(device: PoolDevice) -> str:
    """What a person calls the device: its product, plus the MIG profile or partition mode of a partition."""
    kind_keys, partition_keys, type_key = _kind_keys(device.id.driver)
    kind = _first_string(device, kind_keys) or device.id.driver
    if device.attributes.get(PARTITION) == ("bool", True) or _string(device, type_key) == "mig":
        kind = f"{kind} {_first_string(device, partition_keys) or 'partition'}"
    return kind


def _taints(device: PoolDevice) -> list[str]:
    shown = []
    for taint in device.taints:
        if isinstance(taint, Mapping) and taint.get("effect") in BLOCKING_EFFECTS:
            value = f"={taint.get('value')}" if taint.get("value") else ""
            shown.append(f"{taint.get('key')}{value}:{taint.get('effect')}")
    return shown


def _exclusive(holders: Sequence[Holder]) -> bool:
    """Held by a claim that owns it (adminAccess results share the device and hold nothing)."""
    return any(not h.admin_access for h in holders)


def _counters_used(pool: Pool, holders: Mapping[DeviceID, list[Holder]]) -> dict[tuple[str, str], Decimal]:
    used: dict[tuple[str, str], Decimal] = {}
    for device in pool.devices:
        if device.consumes and _exclusive(holders.get(device.id, ())):
            for set_name, counters in device.consumes:
                for counter, amount in counters:
                    used[(set_name, counter)] = used.get((set_name, counter), Decimal(0)) + amount
    return used


def _short_of(pool: Pool, device: PoolDevice, used: Mapping[tuple[str, str], Decimal]) -> str:
    """The first counter the device needs more of than is left ("" when it fits)."""
    for set_name, counters in device.consumes:
        for counter, amount in counters:
            total = pool.counter_sets.get(set_name, {}).get(counter, Decimal(0))
            if used.get((set_name, counter), Decimal(0)) + amount > total:
                return f"{set_name}/{counter}"
    return ""


def _mark_overlapping(pool: Pool, shown: Sequence[tuple[PoolDevice, DeviceRow]], used: Mapping[tuple[str, str], Decimal]) -> None:
    """Free devices that draw on shared counters are alternatives to each other (a GPU or its MIG placements):
    only a set that fits the counters left all at once stays free, the others become "overlapping".

    Largest first (the most counter drawn), so an untouched GPU counts as one free GPU, not as the GPU plus
    every placement; what a class selects (fleet CLASS) is packed among itself: seven free 1g.10gb per A100.
    """
    taken = dict(used)
    candidates = [(device, row) for device, row in shown if row.state == "free" and device.consumes]
    candidates.sort(key=lambda pair: (-sum(amount for _, counters in pair[0].consumes for _, amount in counters), pair[0].id.device))
    for device, row in candidates:
        if _short_of(pool, device, taken):
            row.state = "overlapping"
            continue
        for set_name, counters in device.consumes:
            for counter, amount in counters:
                taken[(set_name, counter)] = taken.get((set_name, counter), Decimal(0)) + amount



def _capacity_shares(device: PoolDevice, taken: Mapping[str, Decimal] | None) -> list[CapacityShare]:
    """Total, used and left of each capacity of a device several claims may hold (its shares' consumedCapacity)."""
    rows = []
    for name, value in sorted(device.capacity.items()):
        total = quantity.parse(value)
        used = (taken or {}).get(name, Decimal(0))
        rows.append(CapacityShare(name, _format(total), _format(used), _format(max(total - used, Decimal(0)))))
    return rows


def _device_row(
    pool: Pool, device: PoolDevice, holders: list[Holder], used: Mapping[tuple[str, str], Decimal], taken: Mapping[str, Decimal] | None = None
) -> DeviceRow:
    taints = _taints(device)
    row = DeviceRow(
        _node_of(pool, device),
        device.id.driver,
        device.id.pool,
        device.id.device,
        device_kind(device),
        device_vendor(device.id.driver, device.attributes),
        "free",
        holders,
        taints,
        memory=device.capacity.get(f"{device.id.driver}/memory", ""),
    )
    if device.wire.get("allowMultipleAllocations") is True:
        row.shared = _capacity_shares(device, taken)
        # Still free while some of every capacity is left for another claim (its policy may ask for more).
        if holders and any(share.left == "0" for share in row.shared):
            row.state = "allocated"
        elif taints:
            row.state = "tainted"
        return row
    if _exclusive(holders):
        row.state = "allocated"
    elif taints:
        row.state = "tainted"
    else:
        row.blocked_by = _short_of(pool, device, used)
        if row.blocked_by:
            row.state = "blocked"
    return row


def _wanted(row: DeviceRow, filters: Filters) -> bool:
    if filters.nodes and not any(fnmatch.fnmatchcase(row.node, pattern) for pattern in filters.nodes):
        return False
    if filters.vendors and row.vendor not in filters.vendors:
        return False
    return not filters.namespaces or any(h.namespace in filters.namespaces for h in row.holders)


# -- summaries ------------------------------------------------------------------------------------


def _format(amount: Decimal) -> str:
    if amount == amount.to_integral_value() and amount >= 0:
        return quantity.from_bytes(int(amount))
    return str(amount.normalize())


def _counter_rows(pool: Pool, used: Mapping[tuple[str, str], Decimal]) -> list[CounterRow]:
    node = next((t.node_name for t in pool.slice_targets.values() if t.node_name), None) or NO_NODE
    rows = []
    for set_name, counters in sorted(pool.counter_sets.items()):
        for counter, total in sorted(counters.items()):
            taken = used.get((set_name, counter), Decimal(0))
            rows.append(
                CounterRow(node, pool.driver, pool.name, set_name, counter, _format(total), _format(taken), _format(total - taken), taken > 0)
            )
    return rows


def _groups(devices: Iterable[DeviceRow]) -> list[GroupRow]:
    groups: dict[tuple[str, str, str], GroupRow] = {}
    for row in devices:
        key = (row.node, row.driver, row.kind)
        group = groups.get(key)
        if group is None:
            group = groups[key] = GroupRow(*key)
        group.counts[row.state] += 1
    return [groups[key] for key in sorted(groups)]
