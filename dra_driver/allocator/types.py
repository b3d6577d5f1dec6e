"""Plain data the allocator works on: claims, classes, devices, pools, and what it reports.

Everything here is built once from validated input (dra_driver.sources.claims,
dra_driver.allocator.pools) and never mutated by the search, so results are
reproducible and the search itself stays small.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operator": self.operator}
        if self.key:
            out["key"] = self.key
        if self.value:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


@dataclass(frozen=True)
class SubRequest:
    """An `exactly` request, or one entry of `firstAvailable` (then `name` is the subrequest's)."""

    name: str
    class_name: str
    selectors: tuple[str, ...] = ()
    all_devices: bool = False
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()
    capacity_requests: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Request:
    name: str
    alternatives: tuple[SubRequest, ...]  # one for `exactly`, 1..8 for `firstAvailable`
    prioritized: bool = False  # True for firstAvailable: results are named <request>/<sub>

    def result_name(self, alternative: SubRequest) -> str:
        return f"{self.name}/{alternative.name}" if self.prioritized else self.name


@dataclass(frozen=True)
class Constraint:
    requests: tuple[str, ...] = ()  # empty = all requests
    match_attribute: str | None = None
    distinct_attribute: str | None = None

    def applies_to(self, request: str, sub: str | None) -> bool:
        if not self.requests:
            return True
        return request in self.requests or (sub is not None and f"{request}/{sub}" in self.requests)


@dataclass(frozen=True)
class ClaimSpec:
    name: str
    namespace: str
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...] = ()
    configs: tuple[tuple[tuple[str, ...], Mapping[str, Any]], ...] = ()  # (requests, opaque)

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True)
class DeviceClassSpec:
    name: str
    selectors: tuple[str, ...] = ()
    configs: tuple[Mapping[str, Any], ...] = ()  # opaque {driver, parameters}


@dataclass(frozen=True, order=True)
class DeviceID:
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True)
class NodeTarget:
    """Where a slice (or, with perDeviceNodeSelection, a device) is usable."""

    node_name: str | None = None
    all_nodes: bool = False
    node_selector: Mapping[str, Any] | None = None


@dataclass
class PoolDevice:
    id: DeviceID
    wire: Mapping[str, Any]  # the device as published (resource.k8s.io/v1 JSON)
    slice_name: str
    # Attributes keyed by fully qualified name: (type, value), e.g. ("string", "mig").
    attributes: dict[str, tuple[str, Any]]
    capacity: dict[str, str]  # fully qualified name -> quantity string
    consumes: tuple[tuple[str, tuple[tuple[str, Decimal], ...]], ...]  # (counter set, ((counter, amount), ...))
    taints: tuple[Mapping[str, Any], ...]
    target: NodeTarget | None = None  # only with perDeviceNodeSelection


@dataclass
class Pool:
    driver: str
    name: str
    generation: int
    slice_count: int
    slices: list[str] = field(default_factory=list)
    slice_targets: dict[str, NodeTarget] = field(default_factory=dict)  # slice name -> target
    devices: list[PoolDevice] = field(default_factory=list)
    counter_sets: dict[str, dict[str, Decimal]] = field(default_factory=dict)
    invalid: str | None = None  # why the pool cannot be used
    stale_slices: int = 0  # slices dropped because a newer generation exists

    @property
    def incomplete(self) -> bool:
        return len(self.slices) != self.slice_count

    @property
    def partitionable(self) -> bool:
        return bool(self.counter_sets) or any(d.consumes for d in self.devices)


@dataclass(frozen=True)
class Node:
    name: str  # "" when the fleet has no node-local pool at all
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.name or "(any node)"


@dataclass(frozen=True)
class Allocated:
    """A device held by another claim (from that claim's status.allocation)."""

    id: DeviceID
    claim: str
    admin_access: bool = False
