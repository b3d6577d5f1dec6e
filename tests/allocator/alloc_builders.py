"""Builders for ResourceSlice / ResourceClaim / DeviceClass wire objects used by the allocator and explain tests."""

from __future__ import annotations

from typing import Any

from dra_driver.allocator import Allocated, Allocator, CelMatcher, DeviceClassSpec, DeviceID, Explanation, Node, build_pools, node_names
from dra_driver.model.resource_v1 import ResourceClaim
from dra_driver.model.resource_v1_validation import claim_spec_errors
from dra_driver.sources.claims import to_claim

NV = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
CLASS_SELECTORS = {
    GPU_CLASS: [f'device.driver == "{NV}" && device.attributes["{NV}"].type == "gpu"'],
    MIG_CLASS: [f'device.driver == "{NV}" && device.attributes["{NV}"].type == "mig"'],
}


def device(name: str, type_: str = "gpu", memory: str = "80Gi", **attributes: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {"type": {"string": type_}}
    for key, value in attributes.items():
        key = key.replace("__", "/").replace("_dot_", ".")
        if isinstance(value, bool):
            attrs[key] = {"bool": value}
        elif isinstance(value, int):
            attrs[key] = {"int": value}
        else:
            attrs[key] = {"string": value}
    return {"name": name, "attributes": attrs, "capacity": {"memory": {"value": memory}}}


def resource_slice(
    node: str | None,
    devices: list[dict[str, Any]] | None = None,
    pool: str | None = None,
    name: str | None = None,
    generation: int = 0,
    count: int = 1,
    counters: list[dict[str, Any]] | None = None,
    driver: str = NV,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": driver, "pool": {"name": pool or node or "shared", "generation": generation, "resourceSliceCount": count}}
    if node:
        spec["nodeName"] = node
    else:
        spec["allNodes"] = True
    if counters is not None:
        spec["sharedCounters"] = counters
    else:
        spec["devices"] = devices or []
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{pool or node}-{driver}-{generation}-{len(spec.get('devices', []))}"},
        "spec": spec,
    }


def exact(name: str, device_class: str = GPU_CLASS, count: int | None = None, selectors: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": device_class}
    if count is not None:
        body["count"] = count
    if selectors:
        body["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    body.update(extra)
    return {"name": name, "exactly": body}


def sub(name: str, device_class: str, count: int | None = None, selectors: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    entry = exact(name, device_class, count, selectors, **extra)["exactly"]
    entry["name"] = name
    return entry


def claim_doc(
    requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None, name: str = "claim", config: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": devices},
    }


def class_doc(name: str, selectors: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in selectors]},
    }


def classes(extra: dict[str, list[str]] | None = None) -> dict[str, DeviceClassSpec]:
    merged = {**CLASS_SELECTORS, **(extra or {})}
    return {name: DeviceClassSpec(name, tuple(selectors)) for name, selectors in merged.items()}


def allocate(
    slices: list[dict[str, Any]],
    claims: list[dict[str, Any]],
    allocated: dict[DeviceID, str] | None = None,
    extra_classes: dict[str, list[str]] | None = None,
    nodes: list[str] | None = None,
) -> Explanation:
    """Run the real allocator with the real CEL layer; input claims are validated first."""
    known = classes(extra_classes)
    specs = []
    for doc in claims:
        parsed = ResourceClaim.model_validate(doc)
        errors = claim_spec_errors(parsed.spec, "claim", known)
        assert not errors, errors
        specs.append(to_claim(parsed.spec, parsed.metadata.name, parsed.metadata.namespace))
    pools = build_pools(slices)
    held = {d: Allocated(d, c) for d, c in (allocated or {}).items()}
    node_list = [Node(n) for n in (nodes or node_names(pools) or [""])]
    return Allocator(pools, known, CelMatcher(), held).explain(specs, node_list)


def chosen_devices(explanation: Explanation, claim: str = "default/claim") -> list[tuple[str, str]]:
    """(request, pool/device) of the allocation, in result order."""
    assert explanation.chosen is not None, [o.reasons or o.error for o in explanation.nodes]
    results = explanation.chosen.allocations[claim]["devices"]["results"]
    return [(r["request"], f"{r['pool']}/{r['device']}") for r in results]


def rejection(explanation: Explanation, request: str, node: str, device: str) -> Any:
    for report in explanation.alternatives:
        if report.result_name == request:
            for device_id, why in report.nodes[node].rejected:
                if device_id.device == device:
                    return why
            return None
    raise KeyError(request)
