"""What `dra-driver fleet` reports: devices per node and kind, counters, and who holds each device.

Plain dataclasses, built by dra_driver.fleet.build and printed by dra_driver.fleet.render.
Every device falls in exactly one state, so total = allocated + free + overlapping + tainted + blocked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# free: allocatable now, together with every other free device (shared counters included); overlapping:
# allocatable now, but only instead of free devices it shares counters with (another placement of a GPU).
State = Literal["allocated", "free", "overlapping", "tainted", "blocked"]
STATES: tuple[State, ...] = ("allocated", "free", "overlapping", "tainted", "blocked")
NO_NODE = "(no node)"  # pools of network-attached devices (nodeSelector / allNodes slices)


@dataclass(frozen=True)
class PodRef:
    name: str
    phase: str = ""  # from the Pod object when the fleet has it; "" unknown, "Missing" when listed pods lack it


@dataclass(frozen=True)
class Holder:
    """One allocation result naming a device: the claim, its request, and the pods it is reserved for."""

    namespace: str
    claim: str
    request: str
    admin_access: bool = False
    pods: tuple[PodRef, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.claim}" if self.namespace else self.claim


@dataclass(frozen=True)
class CapacityShare:
    capacity: str  # qualified name
    total: str
    used: str
    left: str


@dataclass
class DeviceRow:
    node: str
    driver: str
    pool: str
    device: str
    kind: str
    vendor: str
    state: State
    holders: list[Holder] = field(default_factory=list)
    taints: list[str] = field(default_factory=list)  # key=value:effect of NoSchedule/NoExecute taints
    blocked_by: str = ""  # the counter that is used up, for state "blocked"
    # A device several claims may hold (allowMultipleAllocations): each capacity's total, used and left.
    shared: list[CapacityShare] = field(default_factory=list)
    memory: str = ""  # the device's own memory capacity as published (81559Mi), "" when it publishes none


@dataclass
class GroupRow:
    """Devices of one kind (model, MIG profile, partition mode) of one driver on one node."""

    node: str
    driver: str
    kind: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATES, 0))

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class CounterRow:
    node: str
    driver: str
    pool: str
    counter_set: str
    counter: str
    total: str
    used: str
    left: str
    in_use: bool


@dataclass(frozen=True)
class UnpublishedAllocation:
    """A claim's allocation names a device no current slice publishes (removed, renamed, or a stale pool)."""

    driver: str
    pool: str
    device: str
    holder: Holder


@dataclass
class FleetView:
    sources: list[str]
    devices: list[DeviceRow] = field(default_factory=list)
    groups: list[GroupRow] = field(default_factory=list)
    counters: list[CounterRow] = field(default_factory=list)
    unpublished: list[UnpublishedAllocation] = field(default_factory=list)
    device_class: str | None = None  # the class argument, when given: devices were filtered by it
    notes: list[str] = field(default_factory=list)

    @property
    def nodes(self) -> int:
        return len({d.node for d in self.devices})
