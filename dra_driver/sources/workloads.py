"""Where the pod spec lives in each workload kind we rewrite."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.sources.operators import operator_kind, pod_specs

Key = str | int  # a mapping key or a list index on the path to a field

# kind -> path from the object to its pod spec
POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}


def show_path(path: str, keys: tuple[Key, ...]) -> str:
    """`path` followed by `keys` as a field path: `spec.containers[0].resources`."""
    text = path
    for key in keys:
        text += f"[{key}]" if isinstance(key, int) else f".{key}"
    return text.lstrip(".")


@dataclass(frozen=True)
class Workload:
    """One pod spec of an object: the only one of a Deployment, or one role of an operator resource."""

    kind: str
    name: str
    namespace: str | None
    obj: Any  # the object's mapping (ruamel CommentedMap)
    pod_spec: Any  # its pod spec mapping
    spec_path: str  # "spec.template.spec", prefixed with items[i] inside a List
    spec_keys: tuple[str | int, ...] = ()  # the keys from the object to the pod spec
    role: str = ""  # operator resources: "worker", "head", ...; "" for core kinds
    single_container: bool = False  # NIMService: the "pod spec" is the spec, with one container's `resources`

    @property
    def ref(self) -> str:
        role = f" ({self.role})" if self.role else ""
        return f"{self.kind}/{self.namespace + '/' if self.namespace else ''}{self.name}{role}"


def is_list(obj: Any) -> bool:
    return isinstance(obj, Mapping) and str(obj.get("kind", "")).endswith("List") and isinstance(obj.get("items"), list)


def metadata(obj: Mapping[str, Any]) -> tuple[str, str | None]:
    """(name, namespace); an object with only `generateName: train-` is named `train-*` (its names' pattern)."""
    meta = obj.get("metadata") or {}
    if not isinstance(meta, Mapping):
        return "", None
    namespace = meta.get("namespace")
    name = meta.get("name") or (f"{meta['generateName']}*" if meta.get("generateName") else "")
    return str(name), str(namespace) if namespace else None


def pod_spec(obj: Mapping[str, Any]) -> Any | None:
    """The pod spec of a core workload kind (a Volcano `Job` is an operator resource, not this)."""
    path = POD_SPEC_PATHS.get(str(obj.get("kind", "")))
    if path is None or operator_kind(obj) is not None:
        return None
    node: Any = obj
    for key in path:
        if not isinstance(node, Mapping) or not isinstance(node.get(key), Mapping):
            return None
        node = node[key]
    return node


def objects(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every object of a document: the document itself, or the items of a List (recursively)."""
    if is_list(data):
        for index, item in enumerate(data["items"]):
            yield from objects(item, f"{prefix}items[{index}].")
    elif isinstance(data, Mapping):
        yield prefix, data


def workloads(obj: Mapping[str, Any], prefix: str) -> list[Workload] | None:
    """The pod specs of a core workload or a convertible operator resource; None for any other kind."""
    name, namespace = metadata(obj)
    kind = str(obj.get("kind", ""))
    entry = operator_kind(obj)
    if entry is not None and entry.wrapped:
        return _wrapped(obj, prefix, entry.wrapped)
    if entry is not None:
        if not entry.convert:
            return None
        return [Workload(kind, name, namespace, obj, at.pod_spec, prefix + show_path('', at.keys), at.keys, at.role,
                         entry.single_container) for at in pod_specs(entry, obj)]
    spec = pod_spec(obj)
    if spec is None:
        return None
    return [Workload(kind, name, namespace, obj, spec, prefix + ".".join(POD_SPEC_PATHS[kind]), POD_SPEC_PATHS[kind])]


def _wrapped(obj: Mapping[str, Any], prefix: str, components_at: tuple[str, ...]) -> list[Workload]:
    """The pod specs of the objects an AppWrapper wraps (`components[*].template`), as pod specs of the AppWrapper."""
    name, namespace = metadata(obj)
    node: Any = obj
    for key in components_at:
        node = node.get(key) if isinstance(node, Mapping) else None
    found = []
    for index, component in enumerate(node if isinstance(node, list) else []):
        inner = component.get("template") if isinstance(component, Mapping) else None
        inner_entry = operator_kind(inner) if isinstance(inner, Mapping) else None
        if not isinstance(inner, Mapping) or (inner_entry is not None and inner_entry.wrapped):
            continue  # not an object, or an AppWrapper in an AppWrapper
        keys: tuple[str | int, ...] = (*components_at, index, "template")
        inner_name = metadata(inner)[0]
        for pod in workloads(inner, "") or []:
            role = "-".join(part for part in (inner_name or str(index), pod.role) if part)
            spec_keys = (*keys, *pod.spec_keys)
            found.append(Workload(str(obj.get("kind")), name, namespace, obj, pod.pod_spec,
                                  prefix + show_path("", spec_keys), spec_keys, role))
    return found


def find_resource_maps(node: Any, path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every `resources.limits` / `resources.requests` mapping anywhere below `node` (for unknown kinds)."""
    if isinstance(node, Mapping):
        resources = node.get("resources")
        if isinstance(resources, Mapping):
            for part in ("limits", "requests"):
                if isinstance(resources.get(part), Mapping):
                    yield f"{path}resources.{part}", resources[part]
        for key, value in node.items():
            yield from find_resource_maps(value, f"{path}{key}.")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from find_resource_maps(value, f"{path[:-1]}[{index}].")
