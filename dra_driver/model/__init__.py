"""The vendor-neutral device model (types, slice layout, rendering and API-limit validation) and the Kubernetes
API types every reader imports (resource_v1.py, resource_v1alpha3.py, core_v1.py; strictness in api_base.py)."""

from __future__ import annotations

from dra_driver.model.device import (
    AttributeValue,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceTaint,
    Inventory,
    Version,
)
from dra_driver.model.layout import SliceContent, layout_pool
from dra_driver.model.render import as_list, render_device, render_pool
from dra_driver.model.validation import validate_slices

__all__ = [
    "AttributeValue",
    "CounterConsumption",
    "CounterSet",
    "Device",
    "DeviceTaint",
    "Inventory",
    "SliceContent",
    "Version",
    "as_list",
    "layout_pool",
    "render_device",
    "render_pool",
    "validate_slices",
]
