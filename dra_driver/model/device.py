"""Vendor-neutral inventory: devices, attributes, capacities, counters, taints.

Plain dataclasses: backends build them, layout splits them into slices, render
turns them into resource.k8s.io/v1 wire dicts. Attribute and capacity keys are
qualified names: a bare identifier ("memory") lives in the driver's own domain,
"domain/identifier" in another one (for example "resource.kubernetes.io/pcieRoot").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Union


@dataclass(frozen=True, order=True)
class Version:
    """A semantic-version attribute value (rendered as {"version": ...})."""

    value: str

    def __str__(self) -> str:
        return self.value


AttributeValue = Union[bool, int, str, Version]
TaintEffect = Literal["NoSchedule", "NoExecute", "None"]


@dataclass(frozen=True)
class DeviceTaint:
    key: str
    effect: TaintEffect
    value: str = ""
    time_added: str | None = None  # RFC 3339; the API server fills it when unset


@dataclass(frozen=True)
class CounterConsumption:
    """What a device uses from a shared counter set of the same pool."""

    counter_set: str
    counters: Mapping[str, str]  # counter name -> quantity string


@dataclass(frozen=True)
class CounterSet:
    name: str
    counters: Mapping[str, str]  # counter name -> quantity string


@dataclass(frozen=True)
class CapacityPolicy:
    """A consumable capacity's `requestPolicy` (DRAConsumableCapacity): what one allocation may take of it.

    Amounts are quantity strings; `default` is what a request naming no amount consumes, and it and `max` are
    `min` plus a whole number of `step`s.
    """

    default: str
    min: str
    step: str | None = None
    max: str | None = None


@dataclass
class Device:
    name: str
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    capacity: dict[str, str] = field(default_factory=dict)  # qualified name -> quantity string
    consumes_counters: list[CounterConsumption] = field(default_factory=list)
    taints: list[DeviceTaint] = field(default_factory=list)
    # Consumable capacity: several claims may hold the device at once, each taking part of the capacities
    # that have a policy here (qualified name -> policy).
    allow_multiple_allocations: bool = False
    capacity_policies: dict[str, CapacityPolicy] = field(default_factory=dict)

    @property
    def uses_advanced_features(self) -> bool:
        """True when the 64-device slice limit applies (taints or counter consumption)."""
        return bool(self.taints or self.consumes_counters)


@dataclass
class Inventory:
    """Everything one driver publishes for one node: one pool."""

    driver: str
    devices: list[Device] = field(default_factory=list)
    counter_sets: list[CounterSet] = field(default_factory=list)

    def device(self, name: str) -> Device:
        for candidate in self.devices:
            if candidate.name == name:
                return candidate
        raise KeyError(name)
