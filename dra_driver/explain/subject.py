"""What a file given to explain asks about: the claims to allocate together (or the pods to place one after another) and the classes it brings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.allocator import CelMatcher, ClaimSpec, DeviceClassSpec
from dra_driver.model.core_v1 import Pod
from dra_driver.model.resource_v1 import ResourceClaim, ResourceClaimSpec, ResourceClaimTemplate
from dra_driver.model.resource_v1_validation import claim_spec_errors
from dra_driver.sources.claims import MODELS, parse_object, to_claim
from dra_driver.sources.fleet import class_origins
from dra_driver.common import suggest
from dra_driver.common.errors import FieldError
from dra_driver.ingest.errors import InputError
from dra_driver.explain.workloads import MAX_PODS, WorkloadPod, asks_for_devices, is_workload, workload_pods
from dra_driver.ingest import SourcedObject, read_objects



@dataclass
class ClaimInput:
    label: str  # where it came from, for error paths
    spec: ResourceClaimSpec
    name: str
    namespace: str


@dataclass
class PodPlan:
    """One pod to place: its claims are allocated together on one node, after the pods before it."""

    label: str  # "Pod ml/trainer", or where a workload's pod comes from
    doc: dict[str, Any]  # the Pod document (extended resources)
    claims: list[ClaimInput] = field(default_factory=list)
    # Allocated claims it reuses: label -> status.allocation.nodeSelector (None: usable on any node).
    reused: dict[str, dict[str, Any] | None] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """namespace/name, as extended_resources.py names pods."""
        meta = self.doc.get("metadata") or {}
        return f"{meta.get('namespace') or 'default'}/{meta.get('name') or 'pod'}"


@dataclass
class Subject:
    claims: list[ClaimInput] = field(default_factory=list)
    classes: list[dict[str, Any]] = field(default_factory=list)
    class_origins: dict[str, SourcedObject] = field(default_factory=dict)  # where each DeviceClass is (its errors' lines)
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
    # The pods to place one after another (Pods in the file, pods of workloads); empty: `claims` together.
    pod_plans: list[PodPlan] = field(default_factory=list)


_Named = Mapping[tuple[str, str], Any]  # (namespace, name) -> object; namespace "" for one the file gives without


def _in_namespace(objects: _Named, namespace: str, name: str) -> Any:
    """A pod names claims and templates of its own namespace; one given without a namespace is taken as in it."""
    return objects.get((namespace, name)) or objects.get(("", name))


def _by_name(objects: list[Any]) -> dict[tuple[str, str], Any]:
    return {(obj.metadata.namespace, obj.metadata.name): obj for obj in objects}


def _pod_claims(pod: Pod, templates: _Named, claims: _Named, path: str, subject: Subject, plan: PodPlan) -> list[FieldError]:
    errors: list[FieldError] = []
    namespace = pod.metadata.namespace or "default"
    pod_name = pod.metadata.name or "pod"
    for index, entry in enumerate(pod.spec.resource_claims):
        epath = f"{path}.spec.resourceClaims[{index}]"
        if entry.resource_claim_template_name:
            template = _in_namespace(templates, namespace, entry.resource_claim_template_name)
            if template is None:
                errors.append(
                    FieldError(
                        f"{epath}.resourceClaimTemplateName",
                        f"ResourceClaimTemplate {entry.resource_claim_template_name!r} of namespace {namespace!r} is not in the file; add it",
                    )
                )
                continue
            plan.claims.append(
                ClaimInput(
                    f"ResourceClaimTemplate {entry.resource_claim_template_name}.spec.spec", template.spec.spec, f"{pod_name}-{entry.name}", namespace
                )
            )
        elif entry.resource_claim_name:
            claim = _in_namespace(claims, namespace, entry.resource_claim_name)
            if claim is None:
                errors.append(
                    FieldError(
                        f"{epath}.resourceClaimName",
                        f"ResourceClaim {entry.resource_claim_name!r} of namespace {namespace!r} is neither in the file nor in the cluster",
                    )
                )
                continue
            allocation = claim.status.allocation
            if allocation is not None and allocation.model_fields_set:  # `allocation: {}` allocates nothing
                label = f"{claim.metadata.namespace or namespace}/{claim.metadata.name}"
                note = f"ResourceClaim {label} is already allocated; its devices stay in use and it is not allocated again"
                if note not in subject.notes:
                    subject.notes.append(note)
                selector = allocation.node_selector
                plan.reused[label] = dict(selector) if isinstance(selector, Mapping) else None
                continue
            plan.claims.append(
                ClaimInput(f"ResourceClaim {claim.metadata.name}.spec", claim.spec, claim.metadata.name, claim.metadata.namespace or namespace)
            )
        else:
            errors.append(FieldError(epath, "exactly one of resourceClaimName or resourceClaimTemplateName must be set"))
    return errors


OWN_KINDS = frozenset({*MODELS, "Namespace", "DeviceTaintRule"})
# What explain places or reads, for the messages that say so (workload kinds are migrate's: Deployment, Job, ...).
PLACED = (
    "ResourceClaims, ResourceClaimTemplates, Pods and workloads "
    "(Deployment, StatefulSet, Job, JobSet, PyTorchJob, RayCluster, NIMService... as `dra-driver migrate` writes them)"
)


@dataclass
class _Sorted:
    """The file's documents by what explain does with them."""

    parsed: list[tuple[str, Any, dict[str, Any]]] = field(default_factory=list)  # (label, model, document)
    workload_pods: list[WorkloadPod] = field(default_factory=list)
    errors: list[FieldError] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # kind -> count: kinds explain does not place
    stream: bool = False  # the file holds workloads: a manifest stream


def _misspelt_kind(kind: str) -> FieldError | None:
    """A kind close to one explain reads is a typo, refused with the fix; any other kind is skipped."""
    hint = suggest.did_you_mean(kind, sorted(OWN_KINDS)) if kind else ""
    return FieldError("kind", f"{kind!r} is not a kind explain reads; {hint}") if hint else None


def _sort(path: str, found: Sequence[SourcedObject], subject: Subject) -> _Sorted:
    out = _Sorted()
    # A file with workloads is a manifest stream (migrate's output): its Services, ConfigMaps... schedule nothing.
    # (is_workload imports migrate, ~0.4 s: only for kinds that are not explain's own)
    out.stream = any(item.obj.get("kind") not in OWN_KINDS and is_workload(item.obj) for item in found)
    for index, item in enumerate(found):
        doc = item.obj
        kind = str(doc.get("kind") or "")
        name = str((doc.get("metadata") or {}).get("name") or f"[{index}]")
        label = f"{path}:{item.line}: {kind or 'document'} {name}"
        if kind == "DeviceTaintRule":  # validated with the fleet's rules (taint_rules.py)
            subject.taint_rules.append(dict(doc))
        elif kind == "Namespace":  # only its labels matter (admin access)
            labels = (doc.get("metadata") or {}).get("labels")
            subject.namespace_labels[name] = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
        elif kind not in MODELS and is_workload(doc):
            pods = workload_pods(doc, label)
            out.errors += pods.errors
            subject.notes += pods.notes
            out.workload_pods += pods.pods
        elif kind not in MODELS:  # a Service, a ConfigMap, an operator's own kind (ComputeDomain): no pod explain can place
            typo = _misspelt_kind(kind)
            if typo is not None:
                out.errors.append(FieldError(f"{label}.{typo.path}", typo.message))
            else:
                out.skipped[kind] = out.skipped.get(kind, 0) + 1
        else:
            result = parse_object(doc, label, item.field_label(f"{kind or 'document'} {name}", path))
            if isinstance(result, list):
                out.errors += result
            else:
                out.parsed.append((f"{kind} {name}", result, dict(doc)))
    return out


def read_subject(path: str, cluster_claims: Sequence[Mapping[str, Any]]) -> Subject:
    """What FILE asks about: claims to allocate together (or pods to place), plus DeviceClasses it brings."""
    found = read_objects(path)  # the input layer: limits, envelope rules, one-line errors
    docs = [item.obj for item in found]
    subject = Subject()
    sorted_docs = _sort(path, found, subject)
    if sorted_docs.errors:
        raise InputError(sorted_docs.errors)
    skipped = sorted(sorted_docs.skipped.items())
    skip_notes = [f"skipped {count} {kind}: explain places only {PLACED.split(' (')[0]}" for kind, count in skipped]
    subject.notes += skip_notes
    parsed = sorted_docs.parsed
    templates = _by_name([obj for _, obj, _ in parsed if isinstance(obj, ResourceClaimTemplate)])
    claims = _by_name([obj for _, obj, _ in parsed if isinstance(obj, ResourceClaim)])
    for doc in cluster_claims:
        candidate = parse_object(doc, "cluster claim", from_server=True)
        if isinstance(candidate, ResourceClaim):
            claims.setdefault((candidate.metadata.namespace, candidate.metadata.name), candidate)
    subject.classes = [doc for doc in docs if doc.get("kind") == "DeviceClass"]
    subject.class_origins = class_origins(found)
    subject.allocated_claims = [doc for doc in docs if doc.get("kind") == "ResourceClaim" and (doc.get("status") or {}).get("allocation")]
    pods = [(label, obj, doc) for label, obj, doc in parsed if isinstance(obj, Pod)]
    pods += _placed_workload_pods(sorted_docs.workload_pods, subject)
    subject.pods = [doc for _, _, doc in pods]
    errors: list[FieldError] = []
    if pods:
        for label, pod, doc in pods:
            plan = PodPlan(label, doc)
            errors += _pod_claims(pod, templates, claims, label, subject, plan)
            subject.pod_plans.append(plan)
            subject.claims += plan.claims
            subject.reused.update(plan.reused)
    elif not sorted_docs.stream:  # a file of claims and templates: each is allocated (together)
        for label, obj, _ in parsed:
            if isinstance(obj, ResourceClaimTemplate):
                subject.claims.append(
                    ClaimInput(f"{label}.spec.spec", obj.spec.spec, obj.metadata.name or "claim", obj.metadata.namespace or "default")
                )
            elif isinstance(obj, ResourceClaim):
                ns = obj.metadata.namespace or "default"
                subject.claims.append(ClaimInput(f"{label}.spec", obj.spec, obj.metadata.name, ns))
                subject.own_claims.add(f"{ns}/{obj.metadata.name}")
    if errors:
        raise InputError(errors)
    if not subject.pods and not subject.claims and (sorted_docs.stream or sorted_docs.skipped):
        why = [note for note in subject.notes if note not in skip_notes]
        why += ["skipped " + ", ".join(f"{count} {kind}" for kind, count in skipped)] if skipped else []
        raise InputError([FieldError(path, f"nothing to place ({'; '.join(why)}); explain places {PLACED}")])
    if not subject.claims and not subject.notes and not subject.pods:
        raise InputError([FieldError(path, f"holds nothing to place; explain places {PLACED}")])
    return subject


def _placed_workload_pods(found: list[WorkloadPod], subject: Subject) -> list[tuple[str, Pod, dict[str, Any]]]:
    """The workload pods worth placing (those asking for devices), at most MAX_PODS, as parsed Pods."""
    asking = [pod for pod in found if asks_for_devices(pod.doc["spec"])]
    if len(asking) < len(found):
        subject.notes.append(f"{len(found) - len(asking)} workload pod(s) ask for no devices and are not placed")
    if len(asking) > MAX_PODS:
        subject.notes.append(
            f"only the first {MAX_PODS} of {len(asking)} workload pods are placed; the other {len(asking) - MAX_PODS} are not checked"
        )
        asking = asking[:MAX_PODS]
    out: list[tuple[str, Pod, dict[str, Any]]] = []
    for pod in asking:
        meta = pod.doc["metadata"]
        label = f"Pod {meta['namespace']}/{meta['name']} ({pod.origin})"
        parsed = parse_object(pod.doc, label)
        if isinstance(parsed, list):
            raise InputError(parsed)
        if not isinstance(parsed, Pod):  # the workload readers give kind: Pod documents; anything else is our bug
            raise InputError([FieldError(f"{label}.kind", f"{pod.doc.get('kind')!r} is not a Pod")])
        out.append((label, parsed, pod.doc))
    return out


def validated_claims(subject: Subject, classes: Mapping[str, DeviceClassSpec], matcher: CelMatcher) -> list[ClaimSpec]:
    errors: list[FieldError] = []
    for claim in subject.claims:
        errors += claim_spec_errors(claim.spec, claim.label, classes, matcher.compile_problem)
    if errors:
        raise InputError(errors)
    return [to_claim(c.spec, c.name, c.namespace) for c in subject.claims]
