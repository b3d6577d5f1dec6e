"""Where the pod spec lives in each workload kind we rewrite."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class Workload:
    kind: str
    name: str
    namespace: str | None
    obj: Any  # the object's mapping (ruamel CommentedMap)
    pod_spec: Any  # its pod spec mapping
    spec_path: str  # "spec.template.spec", prefixed with items[i] inside a List

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.namespace + '/' if self.namespace else ''}{self.name}"


def is_list(obj: Any) -> bool:
    return isinstance(obj, Mapping) and str(obj.get("kind", "")).endswith("List") and isinstance(obj.get("items"), list)


def metadata(obj: Mapping[str, Any]) -> tuple[str, str | None]:
    meta = obj.get("metadata") or {}
    if not isinstance(meta, Mapping):
        return "", None
    namespace = meta.get("namespace")
    return str(meta.get("name") or ""), str(namespace) if namespace else None


def pod_spec(obj: Mapping[str, Any]) -> Any | None:
    path = POD_SPEC_PATHS.get(str(obj.get("kind", "")))
    if path is None:
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


def workload(obj: Mapping[str, Any], prefix: str) -> Workload | None:
    spec = pod_spec(obj)
    if spec is None:
        return None
    name, namespace = metadata(obj)
    kind = str(obj["kind"])
    return Workload(kind, name, namespace, obj, spec, prefix + ".".join(POD_SPEC_PATHS[kind]))


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
