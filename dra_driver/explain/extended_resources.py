"""Extended resources served through DRA (DRAExtendedResource): `nvidia.com/gpu: 2` without a claim.

With the gate on, kube-scheduler turns the extended resources a Pod's containers ask for
into one extra claim for the Pod, allocated together with its other claims: each
container's request for a resource that a DeviceClass names in `spec.extendedResourceName`
(or `deviceclass.resource.kubernetes.io/<class>`, which names a class directly) becomes an
ExactCount request of that class. A resource no class maps (or any, with the gate off) must
come from a device plugin: the node's `status.allocatable` must hold it, else the scheduler's
NodeResourcesFit rejects the node with `Insufficient <resource>`. Only Node objects (fleet
files, the cluster) carry allocatable; a simulated node has no device plugin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.model.resource_v1 import ResourceClaimSpec
from dra_driver.explain.gates import FeatureGates
from dra_driver.explain.subject import ClaimInput
from dra_driver.backend.vocabulary import VENDOR_DOMAINS
from dra_driver.explain.workloads import mappings

CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"


@dataclass(frozen=True)
class ExtendedRequest:
    """One container's request for one extended resource."""

    pod: str  # namespace/name
    container: int
    resource: str
    count: int


def pod_extended_requests(pod: Mapping[str, Any]) -> list[ExtendedRequest]:
    """The extended resources each container of a Pod asks for (limits, else requests)."""
    meta = pod.get("metadata") or {}
    label = f"{meta.get('namespace') or 'default'}/{meta.get('name') or 'pod'}"
    out: list[ExtendedRequest] = []
    for index, container in enumerate(mappings((pod.get("spec") or {}).get("containers"))):
        resources = container.get("resources")
        parts = [resources.get(part) for part in ("requests", "limits")] if isinstance(resources, Mapping) else []
        amounts = {name: amount for part in parts if isinstance(part, Mapping) for name, amount in part.items()}
        for name, amount in sorted(amounts.items()):
            if _is_extended(str(name)):
                out.append(ExtendedRequest(label, index, str(name), _count(amount)))
    return out


def _is_extended(name: str) -> bool:
    """Extended resources are domain-qualified names outside kubernetes.io (nvidia.com/gpu)."""
    domain = name.split("/", 1)[0] if "/" in name else ""
    return bool(domain) and (name.startswith(CLASS_PREFIX) or not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io")))


def _count(amount: Any) -> int:
    try:
        return int(str(amount))
    except ValueError:
        return 0  # not a whole number: the API server rejects the Pod before scheduling


def class_for_resources(class_docs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """extendedResourceName -> DeviceClass name, from the merged classes (first by name on a tie)."""
    mapping: dict[str, str] = {}
    for doc in sorted(class_docs, key=lambda d: str((d.get("metadata") or {}).get("name"))):
        resource = (doc.get("spec") or {}).get("extendedResourceName")
        if resource:
            mapping.setdefault(str(resource), str((doc.get("metadata") or {}).get("name")))
    return mapping


@dataclass
class ExtendedResources:
    """What the scheduler makes of a Pod's extended resources."""

    claims: dict[str, ClaimInput] = field(default_factory=dict)  # pod -> the claim serving them through DRA
    plugin: dict[str, dict[str, int]] = field(default_factory=dict)  # pod -> resource -> count a node's allocatable must hold
    notes: list[str] = field(default_factory=list)


def extended_resource_claims(
    requests: Sequence[ExtendedRequest], classes: Mapping[str, str], known: set[str], gates: FeatureGates
) -> ExtendedResources:
    """The claim the scheduler would add per Pod, and what must come from a node's device plugins."""
    out = ExtendedResources()
    by_pod: dict[str, list[dict[str, Any]]] = {}
    for request in requests:
        class_name = request.resource[len(CLASS_PREFIX) :] if request.resource.startswith(CLASS_PREFIX) else classes.get(request.resource)
        if not gates.extended_resource or class_name is None or class_name not in known:
            why = "the DRAExtendedResource gate is off" if not gates.extended_resource else "no DeviceClass names it in extendedResourceName"
            out.notes.append(
                f"Pod {request.pod} container {request.container}: {request.resource}: {request.count} must come from a device plugin ({why}): only "
                "nodes whose status.allocatable holds it can take the Pod"
            )
            needs = out.plugin.setdefault(request.pod, {})
            needs[request.resource] = needs.get(request.resource, 0) + request.count
            continue
        if request.count <= 0:
            continue
        by_pod.setdefault(request.pod, []).append(
            {
                "name": f"container-{request.container}-request-{len(by_pod.get(request.pod, []))}",
                "exactly": {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": request.count},
            }
        )
    for pod, device_requests in by_pod.items():
        namespace, name = pod.split("/", 1)
        spec = ResourceClaimSpec.model_validate({"devices": {"requests": device_requests}})
        out.claims[pod] = ClaimInput(f"Pod {pod} extended resources", spec, f"{name}-extended-resources", namespace)
    return out


def replaced_by_dra(resource: str) -> bool:
    """A resource a node running dra-driver has no device plugin for: the accelerator vendors' own
    (the device-plugin domains of backend/vocabulary.py) and DRA's class-named resources. A simulated node
    lacks these for sure; of anything else (vpc.amazonaws.com/efa) explain knows nothing."""
    domain = resource.split("/", 1)[0]
    return resource.startswith(CLASS_PREFIX) or any(domain == d or domain.endswith("." + d) for d in VENDOR_DOMAINS)


def insufficient(needs: Mapping[str, int], allocatable: Mapping[str, Any]) -> list[str]:
    """The scheduler's NodeResourcesFit reasons for a node whose allocatable lacks what device plugins must give."""
    return [f"Insufficient {resource}" for resource, count in sorted(needs.items()) if count > 0 and _count(allocatable.get(resource, 0)) < count]
