"""The Kubernetes 1.35 feature gates explain models, with their 1.35 defaults (pkg/features/kube_features.go).

Given as `--feature-gates Name=true,Other=false`, like the Kubernetes components take them.
Only gates that change an allocation answer are accepted; an unknown name is an input error.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from dra_driver.errors import FieldError
from dra_driver.explain.errors import InputError

# Gate name -> (field of FeatureGates, 1.35 default).
GATES: dict[str, tuple[str, bool]] = {
    "DRAAdminAccess": ("admin_access", True),
    "DRAConsumableCapacity": ("consumable_capacity", False),
    "DRAExtendedResource": ("extended_resource", False),
    "DRADeviceTaints": ("device_taints", False),
    "DRADeviceTaintRules": ("device_taint_rules", False),
}


@dataclass(frozen=True)
class FeatureGates:
    admin_access: bool = True
    consumable_capacity: bool = False
    extended_resource: bool = False
    device_taints: bool = False
    device_taint_rules: bool = False

    def describe(self) -> str:
        by_field = {field: name for name, (field, _) in GATES.items()}
        return ", ".join(f"{by_field[f.name]}={'on' if getattr(self, f.name) else 'off'}" for f in fields(self))


def parse_gates(text: str | None) -> FeatureGates:
    """`A=true,B=false` over the 1.35 defaults; InputError naming the bad entry."""
    values = {field: default for field, default in GATES.values()}
    errors: list[FieldError] = []
    for entry in filter(None, (part.strip() for part in (text or "").split(","))):
        name, sep, raw = entry.partition("=")
        if name not in GATES:
            errors.append(FieldError("--feature-gates", f"unknown gate {name!r}; known: {', '.join(sorted(GATES))}"))
            continue
        if not sep or raw.lower() not in ("true", "false"):
            errors.append(FieldError("--feature-gates", f"{entry!r}: write {name}=true or {name}=false"))
            continue
        values[GATES[name][0]] = raw.lower() == "true"
    if errors:
        raise InputError(errors)
    return FeatureGates(**values)
