"""Split one pool's inventory into slices under the resource.k8s.io/v1 limits.

Rules (resource/v1 types.go and resource validation, docs/sources.md; the 1.35 counter rule):
- a slice carries devices or shared counters, never both, so counter sets go
  into counters-only slices first (at most 8 per slice);
- a device slice holds at most 128 devices, or 64 when any of its devices
  has taints or consumes counters.
The split is deterministic: the same inventory always gives the same slices,
so the publisher's diff sees no change when nothing changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dra_driver.model.device import CounterSet, Device, Inventory
from dra_driver.model.validation import MAX_COUNTER_SETS, MAX_DEVICES, MAX_DEVICES_ADVANCED  # the API's limits per slice


@dataclass
class SliceContent:
    devices: list[Device] = field(default_factory=list)
    counter_sets: list[CounterSet] = field(default_factory=list)


def _chunks(items: list[CounterSet], size: int) -> list[list[CounterSet]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


def _group_key(device: Device) -> str | None:
    """Devices that consume the same counter set belong to one physical device (a GPU and
    its partitions); keeping them in one slice means a health change of that GPU rewrites
    one slice, not two."""
    return device.consumes_counters[0].counter_set if device.consumes_counters else None


def _groups(devices: list[Device]) -> list[list[Device]]:
    groups: list[list[Device]] = []
    for device in devices:
        key = _group_key(device)
        if groups and key is not None and _group_key(groups[-1][-1]) == key:
            groups[-1].append(device)
        else:
            groups.append([device])
    return groups


def _device_chunks(devices: list[Device], reserve_for_taints: bool) -> list[list[Device]]:
    """Greedy split by groups; a chunk's limit drops to 64 as soon as it holds an advanced device.

    A group never straddles two slices unless it alone exceeds the limit.
    `reserve_for_taints` applies the 64 limit everywhere, so that a taint added
    later for health never moves devices between slices (one health change,
    one slice write).
    """
    chunks: list[list[Device]] = []
    current: list[Device] = []
    for group in _groups(devices):
        advanced = reserve_for_taints or any(d.uses_advanced_features for d in [*current, *group])
        limit = MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES
        if current and len(current) + len(group) > limit:
            chunks.append(current)
            current = []
            advanced = reserve_for_taints or any(d.uses_advanced_features for d in group)
            limit = MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES
        while len(group) > limit:  # a group larger than a slice: split it, nothing else fits
            chunks.append(group[:limit])
            group = group[limit:]
        current.extend(group)
    if current:
        chunks.append(current)
    return chunks


def layout_pool(inventory: Inventory, reserve_for_taints: bool = False) -> list[SliceContent]:
    """The slices of one pool: counters-only slices first, then device slices.

    An empty inventory still yields one empty slice, so that the pool exists
    and consumers see a complete pool with zero devices.
    """
    slices = [SliceContent(counter_sets=chunk) for chunk in _chunks(list(inventory.counter_sets), MAX_COUNTER_SETS)]
    slices.extend(SliceContent(devices=chunk) for chunk in _device_chunks(list(inventory.devices), reserve_for_taints))
    return slices or [SliceContent()]
