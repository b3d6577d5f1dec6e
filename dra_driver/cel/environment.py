"""Which Kubernetes CEL environment a selector is compiled in.

Kubernetes compiles DRA selectors in two environments (k8s.io/apiserver cel/environment):
- StoredExpressions: what kube-scheduler uses for selectors already stored. It declares
  every field any version or gate ever added, so `device.allowMultipleAllocations` is
  always defined (false unless the device sets it).
- NewExpressions: what the API server uses to validate a selector being created or
  changed. Fields behind a feature gate exist only while the gate is on:
  `device.allowMultipleAllocations` needs DRAConsumableCapacity (off by default in 1.35).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EnvironmentKind = Literal["StoredExpressions", "NewExpressions"]
BASE_DEVICE_FIELDS = frozenset({"driver", "attributes", "capacity"})
ALLOW_MULTIPLE_ALLOCATIONS = "allowMultipleAllocations"


@dataclass(frozen=True)
class CelEnvironment:
    kind: EnvironmentKind = "StoredExpressions"
    consumable_capacity: bool = False  # the DRAConsumableCapacity feature gate

    @property
    def device_fields(self) -> frozenset[str]:
        if self.kind == "StoredExpressions" or self.consumable_capacity:
            return BASE_DEVICE_FIELDS | {ALLOW_MULTIPLE_ALLOCATIONS}
        return BASE_DEVICE_FIELDS

    def describe(self) -> str:
        if self.kind == "StoredExpressions":  # declares every field whatever the gates
            return "StoredExpressions (kube-scheduler; device.allowMultipleAllocations always declared)"
        gate = "on" if self.consumable_capacity else "off"
        return f"NewExpressions (API-server validation of new selectors; DRAConsumableCapacity {gate})"


SCHEDULER = CelEnvironment("StoredExpressions")


def api_server(consumable_capacity: bool = False) -> CelEnvironment:
    """The environment the API server validates a new or changed selector in."""
    return CelEnvironment("NewExpressions", consumable_capacity)
