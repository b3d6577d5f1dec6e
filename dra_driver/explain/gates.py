"""Kubernetes 1.35 feature gates for explain, with their 1.35 defaults (pkg/features/kube_features.go).

Given as `--feature-gates Name=true,Other=false`, like the Kubernetes components take them, so a
cluster's gate list can be pasted whole. Gates that change an allocation answer are modelled (GATES);
every other well-formed gate name is accepted and reported as not changing the answer (`ignored`),
with a did-you-mean when it is close to a modelled one. A malformed entry is an input error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields

from dra_driver import suggest
from dra_driver.errors import FieldError
from dra_driver.explain.errors import InputError

# Gate name -> (field of FeatureGates, 1.35 default): the gates that change what explain answers.
GATES: dict[str, tuple[str, bool]] = {
    "DRAAdminAccess": ("admin_access", True),
    "DRAConsumableCapacity": ("consumable_capacity", False),
    "DRAExtendedResource": ("extended_resource", False),
    "DRADeviceTaints": ("device_taints", False),
    "DRADeviceTaintRules": ("device_taint_rules", False),
}
# The other DRA gates of 1.35 and why they leave explain's answer alone.
DRA_GATES_NOT_MODELLED: dict[str, str] = {
    "DynamicResourceAllocation": "GA and locked on",
    "DRAPrioritizedList": "firstAvailable is always evaluated",
    "DRAPartitionableDevices": "counters are always honoured (slices that carry them were accepted by the API server)",
    "DRAResourceClaimDeviceStatus": "device status does not affect allocation",
    "DRASchedulerFilterTimeout": "explain has no timeout; it warns about large searches instead",
    "DRADeviceBindingConditions": "binding conditions act after allocation",
    "ResourceHealthStatus": "kubelet health reporting",
    "KubeletPodResourcesDynamicResources": "kubelet PodResources API",
}
_GATE_NAME = re.compile(r"^[A-Z][A-Za-z0-9]{1,99}$")  # how every Kubernetes gate is spelt


@dataclass(frozen=True)
class FeatureGates:
    admin_access: bool = True
    consumable_capacity: bool = False
    extended_resource: bool = False
    device_taints: bool = False
    device_taint_rules: bool = False
    ignored: tuple[str, ...] = field(default=(), compare=False)  # gates given that do not change the answer

    def describe(self) -> str:
        by_field = {field: name for name, (field, _) in GATES.items()}
        return ", ".join(f"{by_field[f.name]}={'on' if getattr(self, f.name) else 'off'}" for f in fields(self) if f.name in by_field)

    def ignored_note(self) -> str:
        """Which given gates do not change the answer, and why; "" when all given are modelled."""
        if not self.ignored:
            return ""
        parts = []
        for name in self.ignored:
            reason = DRA_GATES_NOT_MODELLED.get(name) or "not a DRA allocation gate"
            close = suggest.did_you_mean(name, GATES) if name not in DRA_GATES_NOT_MODELLED else ""
            parts.append(f"{name} ({reason}{'; ' + close if close else ''})")
        return f"feature gates that do not change this answer: {', '.join(parts)}; those that do: {', '.join(sorted(GATES))}"


def parse_gates(text: str | None) -> FeatureGates:
    """`A=true,B=false` over the 1.35 defaults; InputError naming a malformed entry."""
    values = {field: default for field, default in GATES.values()}
    ignored: list[str] = []
    errors: list[FieldError] = []
    for entry in filter(None, (part.strip() for part in (text or "").split(","))):
        name, sep, raw = (part.strip() for part in entry.partition("="))
        if not _GATE_NAME.match(name):
            errors.append(FieldError("--feature-gates", f"{entry!r}: a gate name is a CamelCase word such as DRAAdminAccess"))
            continue
        if not sep or raw.lower() not in ("true", "false"):
            errors.append(FieldError("--feature-gates", f"{entry!r}: write {name}=true or {name}=false"))
            continue
        if name in GATES:
            values[GATES[name][0]] = raw.lower() == "true"
        elif name not in ignored:
            ignored.append(name)
    if errors:
        raise InputError(errors)
    return FeatureGates(**values, ignored=tuple(ignored))
