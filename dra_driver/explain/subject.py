"""What a file given to explain asks about: the claims to allocate together and the classes it brings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.allocator import CelMatcher, ClaimSpec, DeviceClassSpec
from dra_driver.claims_input import (
    Pod,
    ResourceClaim,
    ResourceClaimSpec,
    ResourceClaimTemplate,
    claim_spec_errors,
    parse_object,
    to_claim,
)
from dra_driver.errors import FieldError
from dra_driver.explain.errors import InputError
from dra_driver.inputs import read_objects



@dataclass
class ClaimInput:
    label: str  # where it came from, for error paths
    spec: ResourceClaimSpec
    name: str
    namespace: str


@dataclass
class Subject:
    claims: list[ClaimInput] = field(default_factory=list)
    classes: list[dict[str, Any]] = field(default_factory=list)
    own_claims: set[str] = field(default_factory=set)  # labels whose existing allocation is ignored
    notes: list[str] = field(default_factory=list)
    # Allocated claims the pod reuses: label -> status.allocation.nodeSelector (None: usable on any node).
    # The scheduler only places the pod where every one of them is available.
    reused: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)  # Namespace objects in the file
    pods: list[dict[str, Any]] = field(default_factory=list)  # the Pod documents (extended resources)
    taint_rules: list[dict[str, Any]] = field(default_factory=list)  # DeviceTaintRule documents in the file
    # ResourceClaim documents in the file that are already allocated: their devices are in use.
    allocated_claims: list[dict[str, Any]] = field(default_factory=list)


def _pod_claims(pod: Pod, templates: Mapping[str, ResourceClaimTemplate], claims: Mapping[str, ResourceClaim], path: str, subject: Subject) -> list[FieldError]:
    errors: list[FieldError] = []
    namespace = pod.metadata.namespace or "default"
    pod_name = pod.metadata.name or "pod"
    for index, entry in enumerate(pod.spec.resource_claims):
        epath = f"{path}.spec.resourceClaims[{index}]"
        if entry.resource_claim_template_name:
            template = templates.get(entry.resource_claim_template_name)
            if template is None:
                errors.append(FieldError(f"{epath}.resourceClaimTemplateName", f"ResourceClaimTemplate {entry.resource_claim_template_name!r} is not in the file; add it"))
                continue
            subject.claims.append(ClaimInput(f"ResourceClaimTemplate {entry.resource_claim_template_name}.spec.spec", template.spec.spec, f"{pod_name}-{entry.name}", namespace))
        elif entry.resource_claim_name:
            claim = claims.get(entry.resource_claim_name)
            if claim is None:
                errors.append(FieldError(f"{epath}.resourceClaimName", f"ResourceClaim {entry.resource_claim_name!r} is neither in the file nor in the cluster"))
                continue
            allocation = (claim.status or {}).get("allocation")
            if allocation:
                label = f"{claim.metadata.namespace or namespace}/{claim.metadata.name}"
                subject.notes.append(f"ResourceClaim {label} is already allocated; its devices stay in use and it is not allocated again")
                selector = allocation.get("nodeSelector") if isinstance(allocation, Mapping) else None
                subject.reused[label] = selector if isinstance(selector, Mapping) else None
                continue
            subject.claims.append(ClaimInput(f"ResourceClaim {claim.metadata.name}.spec", claim.spec, claim.metadata.name, claim.metadata.namespace or namespace))
        else:
            errors.append(FieldError(epath, "exactly one of resourceClaimName or resourceClaimTemplateName must be set"))
    return errors


def read_subject(path: str, cluster_claims: Sequence[Mapping[str, Any]]) -> Subject:
    """What FILE asks about: claims to allocate together, plus DeviceClasses it brings."""
    found = read_objects(path)  # the input layer: limits, envelope rules, one-line errors
    docs = [item.obj for item in found]
    subject = Subject()
    errors: list[FieldError] = []
    parsed: list[tuple[str, Any]] = []
    for index, doc in enumerate(docs):
        kind = str(doc.get("kind") or "")
        name = str((doc.get("metadata") or {}).get("name") or f"[{index}]")
        if kind == "DeviceTaintRule":  # validated with the fleet's rules (taint_rules.py)
            subject.taint_rules.append(dict(doc))
            continue
        if kind == "Namespace":  # only its labels matter (admin access)
            labels = (doc.get("metadata") or {}).get("labels")
            subject.namespace_labels[name] = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
            continue
        result = parse_object(doc, f"{path}:{found[index].line}: {kind or 'document'} {name}")
        if isinstance(result, list):
            errors += result
        else:
            parsed.append((f"{kind} {name}", result))
    if errors:
        raise InputError(errors)
    templates = {obj.metadata.name: obj for _, obj in parsed if isinstance(obj, ResourceClaimTemplate)}
    claims = {obj.metadata.name: obj for _, obj in parsed if isinstance(obj, ResourceClaim)}
    for doc in cluster_claims:
        candidate = parse_object(doc, "cluster claim")
        if isinstance(candidate, ResourceClaim):
            claims.setdefault(candidate.metadata.name, candidate)
    subject.classes = [doc for doc in docs if doc.get("kind") == "DeviceClass"]
    subject.allocated_claims = [doc for doc in docs if doc.get("kind") == "ResourceClaim" and (doc.get("status") or {}).get("allocation")]
    pods = [(label, obj) for label, obj in parsed if isinstance(obj, Pod)]
    subject.pods = [doc for doc in docs if doc.get("kind") == "Pod"]
    if pods:
        for label, pod in pods:
            errors += _pod_claims(pod, templates, claims, label, subject)
    else:
        for label, obj in parsed:
            if isinstance(obj, ResourceClaimTemplate):
                subject.claims.append(ClaimInput(f"{label}.spec.spec", obj.spec.spec, obj.metadata.name or "claim", obj.metadata.namespace or "default"))
            elif isinstance(obj, ResourceClaim):
                ns = obj.metadata.namespace or "default"
                subject.claims.append(ClaimInput(f"{label}.spec", obj.spec, obj.metadata.name, ns))
                subject.own_claims.add(f"{ns}/{obj.metadata.name}")
    if errors:
        raise InputError(errors)
    if not subject.claims and not subject.notes and not subject.pods:
        raise InputError([FieldError(path, "holds no ResourceClaim, ResourceClaimTemplate or Pod")])
    return subject


def validated_claims(subject: Subject, classes: Mapping[str, DeviceClassSpec], matcher: CelMatcher) -> list[ClaimSpec]:
    errors: list[FieldError] = []
    for claim in subject.claims:
        errors += claim_spec_errors(claim.spec, claim.label, classes, matcher.compile_problem)
    if errors:
        raise InputError(errors)
    return [to_claim(c.spec, c.name, c.namespace) for c in subject.claims]
