"""Kubernetes feature gates for explain, with the defaults of the target release (1.35, 1.36 or 1.37;
pkg/features/kube_features.go of each) and that release's scheduler device order.

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
from dra_driver.ingest.errors import InputError
from dra_driver.explain.kube_gates import KUBERNETES_VERSIONS, known_gates

# Gate name -> (field of FeatureGates, 1.35 default): the gates that change what explain answers.
GATES: dict[str, tuple[str, bool]] = {
    "DRAAdminAccess": ("admin_access", True),
    "DRAConsumableCapacity": ("consumable_capacity", False),
    "DRAExtendedResource": ("extended_resource", False),
    "DRADeviceTaints": ("device_taints", False),
    "DRADeviceTaintRules": ("device_taint_rules", False),
}
DEFAULT_KUBERNETES_VERSION = "1.35"
# The modelled gates' defaults per release (1.35.6 and 1.36.2 from their kube_features.go; 1.37 from
# kubernetes master's 1.37 entries): 1.36 turns on taints, consumable capacity and extended resources
# (beta), 1.37 makes taints, taint rules and extended resources GA.
VERSION_DEFAULTS: dict[str, dict[str, bool]] = {
    "1.35": {name: default for name, (_, default) in GATES.items()},
    "1.36": {
        "DRAAdminAccess": True,
        "DRAConsumableCapacity": True,
        "DRAExtendedResource": True,
        "DRADeviceTaints": True,
        "DRADeviceTaintRules": False,
    },
    "1.37": {
        "DRAAdminAccess": True,
        "DRAConsumableCapacity": True,
        "DRAExtendedResource": True,
        "DRADeviceTaints": True,
        "DRADeviceTaintRules": True,
    },
}
# How each release's scheduler walks the pools (k8s.io/dynamic-resource-allocation structured allocator).
DEVICE_ORDER = {
    "1.35": "pools in no fixed order (the 1.35 scheduler's informer order): on a fleet of several pools it may pick other devices than these; "
    "whether the claim fits is the same",
    "1.36": "pools by driver and pool name, slices by name, as the 1.36 scheduler",
    "1.37": "pools by driver and pool name, slices by name, as the 1.36 scheduler",
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
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION  # whose defaults fill the gates not given
    given: str = field(default="", compare=False)  # the --feature-gates text, to apply over another release's defaults

    def at_version(self, version: str) -> FeatureGates:
        """The same --feature-gates over `version`'s defaults (the cluster's release, known after reading it)."""
        return parse_gates(self.given, version)

    def device_order(self) -> str:
        return DEVICE_ORDER[self.kubernetes_version]

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


def check_version(version: str) -> str:
    """`version` when explain knows it (1.35, 1.36, 1.37), else InputError naming the ones it knows."""
    if version not in KUBERNETES_VERSIONS:
        raise InputError(
            [
                FieldError(
                    "--kubernetes-version",
                    f"{version!r}: give one of {', '.join(KUBERNETES_VERSIONS)} (the minor release of the cluster's kube-scheduler)",
                )
            ]
        )
    return version


def release_of(git_version: str | None) -> tuple[str, str]:
    """The release explain models for a server's gitVersion ("v1.36.2" -> "1.36") and a note when it had to
    choose another (older than 1.35: 1.35; newer than 1.37: 1.37; unreadable: 1.35)."""
    match = re.match(r"^v?(\d+)\.(\d+)", git_version or "")
    if not match:
        return (
            DEFAULT_KUBERNETES_VERSION,
            f"the cluster's version {git_version!r} is unreadable: Kubernetes {DEFAULT_KUBERNETES_VERSION} defaults assumed",
        )
    minor = (int(match.group(1)), int(match.group(2)))
    known = [tuple(int(p) for p in v.split(".")) for v in KUBERNETES_VERSIONS]
    chosen = max((v for v in known if v <= minor), default=known[0])
    version = f"{chosen[0]}.{chosen[1]}"
    note = (
        ""
        if chosen == minor
        else f"the cluster runs {git_version}: Kubernetes {version} defaults assumed (explain models {', '.join(KUBERNETES_VERSIONS)})"
    )
    return version, note


def parse_gates(text: str | None, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> FeatureGates:
    """`A=true,B=false` over the release's defaults; InputError naming each malformed entry and each gate that release does not know."""
    kubernetes_version = check_version(kubernetes_version)
    known = known_gates(kubernetes_version)
    values = {GATES[name][0]: default for name, default in VERSION_DEFAULTS[kubernetes_version].items()}
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
        if name not in known:
            errors.append(FieldError("--feature-gates", _unknown_gate(name, kubernetes_version)))
        elif name in GATES:
            values[GATES[name][0]] = raw.lower() == "true"
        elif name not in ignored:
            ignored.append(name)
    if errors:
        raise InputError(errors)
    return FeatureGates(**values, ignored=tuple(ignored), kubernetes_version=kubernetes_version, given=text or "")


def _unknown_gate(name: str, version: str) -> str:
    """Why `name` is refused: Kubernetes would refuse it too, and a misspelt modelled gate must not be dropped silently."""
    return f"unknown feature gate {name!r}: Kubernetes {version} has no gate of that name" + (
        _close_gate(name, version) or " (names are case-sensitive, as in the cluster's --feature-gates)"
    )


def _close_gate(name: str, version: str = DEFAULT_KUBERNETES_VERSION) -> str:
    """`; did you mean 'X'?` for the closest known gates, "" when none is close."""
    close = suggest.did_you_mean(name, sorted(known_gates(version)))
    return f"; {close}" if close else ""
