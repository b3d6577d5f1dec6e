"""Quota and capacity objects that count device-plugin resources, which migrated workloads no longer request.

- A ResourceQuota's `requests.<resource>` limits pods' extended-resource requests; DRA
  claims are counted per DeviceClass as `<class>.deviceclass.resource.k8s.io/devices`
  (the devices the namespace's claims of that class may ask for). Where the resource
  maps to a class exactly (the class alone, no extra selector) that key is added with
  the same limit. The old key stays: pods not migrated (time-sliced, operators) still
  request the resource, and it then limits them alone.
- Kueue charges claims only through `deviceClassMappings` in its own Configuration,
  Karpenter and Volcano limit node or queue capacity by resource name: these are not
  changed here (the fix is elsewhere or has no DRA equivalent) and each is reported
  with what to apply.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from dra_driver.sources.workloads import Key, show_path
from dra_driver.migrate.context import Context
from dra_driver.migrate.report import Action
from dra_driver.migrate.resources import DeviceKind, classify

QUOTA_PREFIX = "requests."
CLASS_QUOTA = "{device_class}.deviceclass.resource.k8s.io/devices"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def class_quota_key(kind: DeviceKind) -> str | None:
    """The DRA quota key counting exactly the devices `kind` asks for; None when its class holds more than those."""
    return None if kind.selectors else CLASS_QUOTA.format(device_class=kind.device_class)


def _kueue_mapping(kind: DeviceKind) -> str:
    return (f"resources: {{deviceClassMappings: [{{name: {kind.resource}, deviceClassNames: [{kind.device_class}]}}]}}")


def _resource_quota(ctx: Context, obj: Mapping[str, Any], prefix: str, strategy: str) -> bool:
    spec = obj.get("spec")
    hard = spec.get("hard") if isinstance(spec, Mapping) else None
    if not isinstance(hard, MutableMapping):
        return False
    changed = False
    path = f"{prefix}spec.hard"
    for key in list(hard):
        resource = str(key).removeprefix(QUOTA_PREFIX)
        kind = classify(resource, ctx.catalog.names)
        if kind is None:
            continue
        if not isinstance(kind, DeviceKind):
            ctx.add(Action.NOT_CONVERTED, path, str(key), f"{kind.reason}; the quota stays as it is")
            continue
        target = class_quota_key(kind)
        if strategy != "claims":
            ctx.add(Action.NOTE, path, str(key),
                    "pods keep requesting the extended resource, which this quota keeps counting; the claims the "
                    f"scheduler creates for it are counted per class as well, so also set "
                    f"<class>.deviceclass.resource.k8s.io/devices to the same limit for the class with "
                    f"extendedResourceName {resource}")
            continue
        if target is None:
            ctx.add(Action.NOT_CONVERTED, path, str(key),
                    f"claims for {resource} use class {kind.device_class} with a selector, and a class quota would count "
                    f"every device of {kind.device_class}; set {CLASS_QUOTA.format(device_class=kind.device_class)} "
                    "by hand if that is what you want")
            continue
        if not str(key).startswith(QUOTA_PREFIX):
            continue  # a bare resource name is not a valid quota key for an extended resource; left to the API server
        if target in hard:
            if str(hard[target]) != str(hard[key]):
                ctx.add(Action.NOTE, path, target, f"already set to {hard[target]}, while {key} is {hard[key]}; kept")
            continue
        hard[target] = hard[key]
        changed = True
        ctx.add(Action.CONVERTED, path, str(key),
                f"added {target}: {hard[key]} (claims of class {kind.device_class}, as migrated workloads now ask); "
                f"{key} stays for pods that still request {resource}")
    return changed


def _names_in(node: Any) -> list[str]:
    """Resource names in a list of names or of `{name: ...}` maps (Kueue coveredResources / flavors[].resources)."""
    names = []
    for entry in node if isinstance(node, list) else []:
        name = entry.get("name") if isinstance(entry, Mapping) else entry
        if isinstance(name, str):
            names.append(name)
    return names


def _cluster_queue(ctx: Context, obj: Mapping[str, Any], prefix: str, strategy: str) -> bool:
    """Reported only; never changed."""
    spec = obj.get("spec")
    groups = spec.get("resourceGroups") if isinstance(spec, Mapping) else None
    for index, group in enumerate(groups if isinstance(groups, list) else []):
        if not isinstance(group, Mapping):
            continue
        for resource in dict.fromkeys(_names_in(group.get("coveredResources"))):
            kind = classify(resource, ctx.catalog.names)
            if not isinstance(kind, DeviceKind) or strategy != "claims":
                continue
            ctx.add(Action.NOT_CONVERTED, f"{prefix}spec.resourceGroups[{index}].coveredResources", resource,
                    "Kueue charges a workload's claims against this quota only when its Configuration maps their class "
                    f"to a resource (Kueue's DynamicResourceAllocation feature gate on); add `{_kueue_mapping(kind)}` "
                    f"to the Kueue Configuration, so claims of class {kind.device_class} count as {resource} here, or "
                    "migrated workloads use GPUs without quota")
    return False


def _provisioning_request_config(ctx: Context, obj: Mapping[str, Any], prefix: str, strategy: str) -> bool:
    """Reported only; never changed."""
    spec = obj.get("spec")
    managed = spec.get("managedResources") if isinstance(spec, Mapping) else None
    for index, resource in enumerate(managed if isinstance(managed, list) else []):
        kind = classify(str(resource), ctx.catalog.names)
        if not isinstance(kind, DeviceKind) or strategy != "claims":
            continue
        ctx.add(Action.NOT_CONVERTED, f"{prefix}spec.managedResources[{index}]", str(resource),
                f"Kueue puts into a ProvisioningRequest only the pod sets that request one of managedResources, and "
                f"counts a workload with none as ready; migrated pods no longer request {resource}, so no nodes may be "
                f"provisioned for them: map their class to it in the Kueue Configuration (`{_kueue_mapping(kind)}`, "
                "DynamicResourceAllocation gate; check that your Kueue version counts claims for provisioning), or "
                "leave managedResources empty (every resource managed)")
    return False


def _device_entries(ctx: Context, maps: list[tuple[str, Any]]) -> Iterator[tuple[str, str, DeviceKind, Any]]:
    """(path, resource, kind, value) of each convertible device resource in the (path, map) pairs."""
    for path, values in maps:
        for resource, value in values.items() if isinstance(values, Mapping) else []:
            kind = classify(str(resource), ctx.catalog.names)
            if isinstance(kind, DeviceKind):
                yield path, str(resource), kind, value


def _quota_advice(kind: DeviceKind, value: Any) -> str:
    key = class_quota_key(kind)
    if key is None:
        return f"a ResourceQuota on {CLASS_QUOTA.format(device_class=kind.device_class)} (it counts every device of the class)"
    return f"a ResourceQuota with `spec.hard: {{{key}: {value}}}`"


def _karpenter(ctx: Context, obj: Mapping[str, Any], prefix: str, strategy: str) -> bool:
    """Reported only; never changed."""
    spec = obj.get("spec")
    maps = [(f"{prefix}spec.limits", spec.get("limits") if isinstance(spec, Mapping) else None)]
    for path, resource, _, _ in _device_entries(ctx, maps) if strategy == "claims" else []:
        ctx.add(Action.NOT_CONVERTED, path, resource,
                "Karpenter limits the capacity of the nodes it launches, read from its instance types, so this "
                f"limit still caps {resource} nodes; but it picks instance types from pods' resource requests, and "
                f"migrated pods no longer request {resource}: check that your Karpenter version provisions for "
                "pods with ResourceClaims, or steer them to GPU NodePools with a nodeSelector on a label those "
                "NodePools set")
    return False


def _volcano_queue(ctx: Context, obj: Mapping[str, Any], prefix: str, strategy: str) -> bool:
    """Reported only; never changed."""
    given = obj.get("spec")
    spec = given if isinstance(given, Mapping) else {}
    guarantee = spec.get("guarantee")
    maps = [(f"{prefix}spec.capability", spec.get("capability")), (f"{prefix}spec.deserved", spec.get("deserved")),
            (f"{prefix}spec.guarantee.resource", guarantee.get("resource") if isinstance(guarantee, Mapping) else None)]
    for path, resource, kind, value in _device_entries(ctx, maps) if strategy == "claims" else []:
        ctx.add(Action.NOT_CONVERTED, path, resource,
                f"the Volcano queue counts pods' {resource} requests, which migrated pods no longer make, so their GPUs "
                f"are not counted against it; limit them with {_quota_advice(kind, value)} in the queue's namespaces")
    return False


# What LimitRanger (plugin/pkg/admission/limitranger in Kubernetes) does at a pod's admission with each field of a
# LimitRange entry: it copies `default` into the limits and `defaultRequest` into the requests of every container
# that lacks the resource, then rejects containers without a request (`min`, `maxLimitRequestRatio`) or a limit (`max`).
_LIMIT_RANGE_FIELDS = {
    "max": "rejects a new pod whose containers have no {resource} limit",
    "min": "rejects a new pod whose containers have no {resource} request",
    "default": "writes {value} {resource} into the limits of every container of a new pod that has none",
    "defaultRequest": "writes {value} {resource} into the requests of every container of a new pod that has none",
    "maxLimitRequestRatio": "rejects a new pod whose containers have no {resource} request",
}
_FILLED_IN = ("default", "defaultRequest")


def _limit_range(ctx: Context, obj: Mapping[str, Any], prefix: str, strategy: str) -> bool:
    """Reported only; never changed. A default is a device-plugin request LimitRanger adds to migrated pods."""
    spec = obj.get("spec")
    limits = spec.get("limits") if isinstance(spec, Mapping) else None
    for index, entry in enumerate(limits if isinstance(limits, list) else []):
        if not isinstance(entry, Mapping):
            continue
        for name, effect in _LIMIT_RANGE_FIELDS.items():
            path = f"{prefix}spec.limits[{index}].{name}"
            for _, resource, kind, value in _device_entries(ctx, [(path, entry.get(name))]) if strategy == "claims" else []:
                what = effect.format(value=value, resource=resource)
                if name in _FILLED_IN:
                    ctx.leave(path, resource,
                              f"LimitRanger {what}, migrated containers included: each migrated pod would ask for its "
                              f"claim's devices and for {resource} from the device plugin as well; remove {resource} "
                              f"from `{name}` before rolling out the migrated workloads")
                    continue
                ctx.add(Action.NOT_CONVERTED, path, resource,
                        f"LimitRanger {what}, and migrated containers have none: remove {resource} from `{name}` before "
                        f"rolling out the migrated workloads (DRA has no per-container device bound), and limit the "
                        f"namespace's devices with {_quota_advice(kind, value)} instead")
    return False


@dataclass(frozen=True)
class _CapacityKind:
    groups: tuple[str, ...]
    handle: Callable[[Context, Mapping[str, Any], str, str], bool]  # True when it changed the object


CAPACITY_KINDS: dict[str, _CapacityKind] = {
    "ResourceQuota": _CapacityKind(("",), _resource_quota),
    "ClusterQueue": _CapacityKind(("kueue.x-k8s.io",), _cluster_queue),
    "ProvisioningRequestConfig": _CapacityKind(("kueue.x-k8s.io",), _provisioning_request_config),
    "NodePool": _CapacityKind(("karpenter.sh",), _karpenter),
    "Queue": _CapacityKind(("scheduling.volcano.sh",), _volcano_queue),
    "LimitRange": _CapacityKind(("",), _limit_range),
}


def capacity_kind(obj: Mapping[str, Any]) -> _CapacityKind | None:
    entry = CAPACITY_KINDS.get(str(obj.get("kind", "")))
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    return entry if entry is not None and group in entry.groups else None


def migrate_capacity(ctx: Context, obj: Mapping[str, Any], prefix: str, strategy: str) -> bool | None:
    """Convert or report a quota/capacity object: whether it changed, None when `obj` is not one."""
    entry = capacity_kind(obj)
    return None if entry is None else entry.handle(ctx, obj, prefix, strategy)


def kueue_queue_label(obj: Mapping[str, Any], spec_keys: list[tuple[Key, ...]]) -> str | None:
    """Where `obj` carries Kueue's queue label: its own labels, or those of one of its pod templates (the
    templates holding the pod specs at `spec_keys`); None when it is not queued by Kueue."""
    places: list[tuple[Key, ...]] = [(), *(keys[:-1] for keys in spec_keys)]
    for keys in places:
        node: Any = obj
        for key in (*keys, "metadata", "labels"):
            node = node.get(key) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping) and KUEUE_QUEUE_LABEL in node:
            return show_path("", (*keys, "metadata", "labels"))
    return None


def note_kueue(ctx: Context, path: str) -> None:
    ctx.add(Action.NOTE, path, KUEUE_QUEUE_LABEL,
            "Kueue admits this workload; it charges its claims against the ClusterQueue only when "
            "the Kueue Configuration maps the class in resources.deviceClassMappings (Kueue's DynamicResourceAllocation "
            "feature gate), otherwise its GPUs are used without quota")
