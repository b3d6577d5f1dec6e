"""The slice specs one (node, driver) pool should have: inventory + health, laid out and rendered.

The layout always reserves room for taints (64 devices per slice), so that a
health change alters the content of exactly one slice and never moves devices
between slices: one health change, one slice write. When the API server drops
taints (DRADeviceTaints off), unhealthy devices are withdrawn from their slice
after the layout, for the same reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from dra_driver.model.device import Device, DeviceTaint, Inventory
from dra_driver.model.layout import SliceContent, layout_pool
from dra_driver.model.api_group import API_VERSION
from dra_driver.model.render import render_slice_spec
from dra_driver.model.validation import validate_slices

JsonObject = dict[str, Any]


def _with_taints(device: Device, extra: DeviceTaint) -> Device:
    keep = [t for t in device.taints if (t.key, t.effect) != (extra.key, extra.effect)]
    return replace(device, taints=[*keep, extra])


def merge_health(inventory: Inventory, unhealthy: Mapping[str, DeviceTaint]) -> Inventory:
    """The inventory with a health taint added to each unhealthy device (unknown names are ignored)."""
    devices = [_with_taints(d, unhealthy[d.name]) if d.name in unhealthy else d for d in inventory.devices]
    return Inventory(driver=inventory.driver, devices=devices, counter_sets=list(inventory.counter_sets))


def strip_partitioning(inventory: Inventory) -> Inventory:
    """The inventory without shared counters or counter consumption (for a server that drops them)."""
    devices = [replace(d, consumes_counters=[]) for d in inventory.devices]
    return Inventory(driver=inventory.driver, devices=devices, counter_sets=[])


def strip_consumable(inventory: Inventory) -> Inventory:
    """The inventory without consumable capacity (for a server that drops it): each device for one claim at a time."""
    devices = [replace(d, allow_multiple_allocations=False, capacity_policies={}) for d in inventory.devices]
    return Inventory(driver=inventory.driver, devices=devices, counter_sets=list(inventory.counter_sets))


def desired_specs(
    inventory: Inventory,
    node_name: str,
    pool_name: str,
    unhealthy: Mapping[str, DeviceTaint],
    taints_supported: bool = True,
) -> list[JsonObject]:
    """Rendered specs (generation 0; the planner sets generation and count), validated against the API rules."""
    if taints_supported:
        contents = layout_pool(merge_health(inventory, unhealthy), reserve_for_taints=True)
    else:
        contents = [
            SliceContent(devices=[d for d in content.devices if d.name not in unhealthy], counter_sets=content.counter_sets)
            for content in layout_pool(inventory, reserve_for_taints=True)
        ]
    specs = [render_slice_spec(content, inventory.driver, node_name, pool_name, 0, len(contents)) for content in contents]
    validate_slices(
        [
            {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": {"name": f"{node_name}-{inventory.driver}-{i}"}, "spec": s}
            for i, s in enumerate(specs)
        ],
        subject=f"ResourceSlices of {inventory.driver} on {node_name}",
    )
    return specs
