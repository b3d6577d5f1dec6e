"""Render the model as resource.k8s.io/v1 wire format (camelCase dicts, quantities as strings)."""

from __future__ import annotations

from typing import Any

from dra_driver.model.device import (
    AttributeValue,
    CapacityPolicy,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceTaint,
    Inventory,
    Version,
)
from dra_driver.model.api_group import API_VERSION
from dra_driver.model.layout import SliceContent, layout_pool


def render_attribute(value: AttributeValue) -> dict[str, Any]:
    # bool first: bool is a subclass of int in Python.
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, Version):
        return {"version": value.value}
    if isinstance(value, str):
        return {"string": value}
    raise TypeError(f"unsupported attribute value {value!r} ({type(value).__name__})")


def _render_counters(counters: dict[str, str] | Any) -> dict[str, dict[str, str]]:
    return {name: {"value": str(quantity)} for name, quantity in counters.items()}


def render_consumption(consumption: CounterConsumption) -> dict[str, Any]:
    return {"counterSet": consumption.counter_set, "counters": _render_counters(consumption.counters)}


def render_taint(taint: DeviceTaint) -> dict[str, Any]:
    out: dict[str, Any] = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        out["value"] = taint.value
    if taint.time_added:
        out["timeAdded"] = taint.time_added
    return out


def _render_capacity(value: str, policy: CapacityPolicy | None) -> dict[str, Any]:
    if policy is None:
        return {"value": value}
    valid_range: dict[str, str] = {"min": policy.min}
    if policy.max is not None:
        valid_range["max"] = policy.max
    if policy.step is not None:
        valid_range["step"] = policy.step
    return {"value": value, "requestPolicy": {"default": policy.default, "validRange": valid_range}}


def render_device(device: Device) -> dict[str, Any]:
    out: dict[str, Any] = {"name": device.name}
    if device.attributes:
        out["attributes"] = {key: render_attribute(value) for key, value in device.attributes.items()}
    if device.capacity:
        out["capacity"] = {key: _render_capacity(str(value), device.capacity_policies.get(key)) for key, value in device.capacity.items()}
    if device.allow_multiple_allocations:
        out["allowMultipleAllocations"] = True
    if device.consumes_counters:
        out["consumesCounters"] = [render_consumption(c) for c in device.consumes_counters]
    if device.taints:
        out["taints"] = [render_taint(t) for t in device.taints]
    return out


def render_counter_set(counter_set: CounterSet) -> dict[str, Any]:
    return {"name": counter_set.name, "counters": _render_counters(counter_set.counters)}


def render_slice_spec(
    content: SliceContent, driver: str, node_name: str, pool_name: str, generation: int, slice_count: int
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": driver,
        "nodeName": node_name,
        "pool": {"name": pool_name, "generation": generation, "resourceSliceCount": slice_count},
    }
    if content.counter_sets:
        spec["sharedCounters"] = [render_counter_set(cs) for cs in content.counter_sets]
    else:
        spec["devices"] = [render_device(d) for d in content.devices]
    return spec


def render_pool(
    inventory: Inventory,
    node_name: str,
    pool_name: str | None = None,
    generation: int = 0,
    reserve_for_taints: bool = False,
) -> list[dict[str, Any]]:
    """The ResourceSlice objects of one node-local pool, named `<node>-<driver>-<index>`.

    The publisher replaces the names with generateName; `discover` prints them as is.
    """
    pool = pool_name or node_name
    contents = layout_pool(inventory, reserve_for_taints=reserve_for_taints)
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-{inventory.driver}-{index}"},
            "spec": render_slice_spec(content, inventory.driver, node_name, pool, generation, len(contents)),
        }
        for index, content in enumerate(contents)
    ]


def as_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    """A kubectl-style List, what `discover -o json|yaml` prints."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}
