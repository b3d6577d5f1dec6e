"""Kubernetes 1.35 feature gates for explain, with their 1.35 defaults (pkg/features/kube_features.go).

Given as `--feature-gates Name=true,Other=false`, like the Kubernetes components take them, so a
cluster's gate list can be pasted whole. Gates that change an allocation answer are modelled (GATES);
every other gate Kubernetes 1.35 knows (kube_gates.KNOWN_GATES) is accepted and reported as not
changing the answer (`ignored`). A name 1.35 does not know, or a malformed entry, is an input error
with a did-you-mean from the known names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields

from dra_driver.common import suggest
from dra_driver.common.errors import FieldError
from dra_driver.explain.errors import InputError
from dra_driver.explain.kube_gates import KNOWN_GATES, KUBERNETES_VERSION

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
            parts.append(f"{name} ({DRA_GATES_NOT_MODELLED.get(name) or 'not a DRA allocation gate'})")
        return f"feature gates that do not change this answer: {', '.join(parts)}; those that do: {', '.join(sorted(GATES))}"


def parse_gates(text: str | None) -> FeatureGates:
    """`A=true,B=false` over the 1.35 defaults; InputError naming each malformed entry and each gate 1.35 does not know."""
    values = {field: default for field, default in GATES.values()}
    ignored: list[str] = []
    errors: list[FieldError] = []
    for entry in filter(None, (part.strip() for part in (text or "").split(","))):
        name, sep, raw = (part.strip() for part in entry.partition("="))
        if not _GATE_NAME.match(name):
            errors.append(FieldError("--feature-gates", f"{entry!r}: a gate name is a CamelCase word such as DRAAdminAccess{_close_gate(name)}"))
            continue
        if not sep or raw.lower() not in ("true", "false"):
            errors.append(FieldError("--feature-gates", f"{entry!r}: write {name}=true or {name}=false"))
            continue
        if name not in KNOWN_GATES:
            errors.append(FieldError("--feature-gates", _unknown_gate(name)))
        elif name in GATES:
            values[GATES[name][0]] = raw.lower() == "true"
        elif name not in ignored:
            ignored.append(name)
    if errors:
        raise InputError(errors)
    return FeatureGates(**values, ignored=tuple(ignored))


def _unknown_gate(name: str) -> str:
    """Why `name` is refused: Kubernetes would refuse it too, and a misspelt modelled gate must not be dropped silently."""
    return f"unknown feature gate {name!r}: Kubernetes {KUBERNETES_VERSION} has no gate of that name" + (_close_gate(name) or " (names are case-sensitive, as in the cluster's --feature-gates)")


def _close_gate(name: str) -> str:
    """`; did you mean 'X'?` for the closest known gates, "" when none is close."""
    close = suggest.did_you_mean(name, sorted(KNOWN_GATES))
    return f"; {close}" if close else ""
