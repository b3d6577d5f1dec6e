"""Workloads (what `migrate` writes) as the Pods the scheduler would see.

A Deployment, Job, PyTorchJob, RayCluster... holds one or more pod templates; their
controllers create pods from them, each with its own claims from the templates it names.
Where the pod templates live is shared with migrate (`sources/workloads.py`, the operator
table in `sources/operators.py`); this module only turns each template into Pod documents:
one per replica, `replicas` and `parallelism` multiplied along the path from the object to
the template (Deployment `spec.replicas`, Job `spec.parallelism`, Kubeflow
`<role>.replicas`, a JobSet's `replicatedJobs[].replicas` x its Job's `parallelism`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_driver.common.errors import FieldError
from dra_driver.sources.operators import NIM_CLAIMS, operator_kind
from dra_driver.sources.workloads import POD_SPEC_PATHS, Workload, workloads

MAX_PODS = 64  # pods placed per run; a bigger workload is checked for its first ones, and says so
REPLICA_KEYS = ("replicas", "parallelism")


@dataclass(frozen=True)
class WorkloadPod:
    """One pod a workload's controller would create."""

    doc: dict[str, Any]  # a Pod document: metadata (name, namespace) and the template's spec
    origin: str  # "Deployment inference/llm-serving (replica 2 of 3)"


@dataclass
class WorkloadPods:
    pods: list[WorkloadPod] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: list[FieldError] = field(default_factory=list)


def is_workload(doc: Mapping[str, Any]) -> bool:
    """A kind migrate knows to hold pod templates (core workloads and operator resources), converted or not."""
    return operator_kind(doc) is not None or str(doc.get("kind")) in POD_SPEC_PATHS


def workload_pods(doc: Mapping[str, Any], label: str) -> WorkloadPods:
    """The pods `doc` would create; an error for a kind whose pods explain cannot know."""
    out = WorkloadPods()
    entry = operator_kind(doc)
    if entry is not None and not entry.convert:
        out.errors.append(FieldError(f"{label}.kind", f"explain cannot place the pods of this {entry.kind}: {entry.check}"))
        return out
    found = workloads(doc, "") or []
    if not found:
        out.errors.append(FieldError(label, "holds no pod template explain can read; give its pods (or their ResourceClaims) instead"))
        return out
    if entry is None and doc.get("kind") == "DaemonSet":
        out.notes.append(
            f"{label}: a DaemonSet runs one pod on every node it selects; explain places one, and its node summary says how many nodes could take it"
        )
    for workload in found:
        out.pods += _replica_pods(doc, workload, out.notes)
    return out


# What a single-container operator resource's spec (NIMService) carries into its pods besides the container.
_POD_FIELDS = ("nodeSelector", "tolerations", "affinity", "runtimeClassName", "schedulerName", "priorityClassName")


def _single_container_pod_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The pod spec a NIM-style operator builds from its resource's spec: one model container with the spec's
    `resources`, and every `draResources` entry (what migrate writes) as a pod claim that container uses."""
    pod: dict[str, Any] = {key: spec[key] for key in _POD_FIELDS if key in spec}
    container: dict[str, Any] = {"name": "model"}
    resources = spec.get("resources")
    container_resources: dict[str, Any] = dict(resources) if isinstance(resources, Mapping) else {}
    claims: list[dict[str, Any]] = []
    for index, entry in enumerate(mappings(spec.get(NIM_CLAIMS))):
        source = {key: entry[key] for key in ("resourceClaimName", "resourceClaimTemplateName") if entry.get(key)}
        if source:
            claims.append({"name": f"{NIM_CLAIMS.lower()}-{index}", **source})
    if claims:
        pod["resourceClaims"] = claims
        container_resources["claims"] = [{"name": claim["name"]} for claim in claims]
    if container_resources:
        container["resources"] = container_resources
    pod["containers"] = [container]
    return pod


def _replica_pods(doc: Mapping[str, Any], workload: Workload, notes: list[str]) -> list[WorkloadPod]:
    """One Pod per replica of one pod template (migrate's Workload), at most MAX_PODS."""
    total = replicas(doc, workload.spec_keys)
    pod_spec = dict(workload.pod_spec)
    if workload.single_container:  # the spec is the pod's settings and its model container's: replicas there count too
        own = pod_spec.get("replicas", 1)
        total *= own if isinstance(own, int) and not isinstance(own, bool) and own >= 0 else 1
        pod_spec = _single_container_pod_spec(pod_spec)
    if total == 0:
        notes.append(f"{workload.ref}: 0 replicas, no pod to place")
    elif total > MAX_PODS:
        notes.append(f"{workload.ref}: {total:,} replicas; explain places at most {MAX_PODS} pods, the others are not checked")
    shown = workload.name or str((doc.get("metadata") or {}).get("generateName") or "")  # generateName: "eval-"
    base = _pod_name(shown.rstrip("-") or workload.kind.lower(), workload.role)
    namespace = workload.namespace or "default"
    origin = f"{workload.kind} {namespace}/{shown}" + (f" ({workload.role})" if workload.role else "")
    pods: list[WorkloadPod] = []
    for index in range(min(total, MAX_PODS)):
        name = base if total == 1 else f"{base}-{index}"
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": dict(pod_spec)}
        pods.append(WorkloadPod(pod, origin + (f", replica {index + 1} of {total:,}" if total > 1 else "")))
    return pods


def replicas(obj: Mapping[str, Any], keys: tuple[str | int, ...]) -> int:
    """How many pods one pod template stands for: every `replicas`/`parallelism` on the way to it, multiplied."""
    count = 1
    node: Any = obj
    for key in keys[:-1]:  # the last key leads into the pod spec itself
        node = node[key]
        if isinstance(node, Mapping):
            for name in REPLICA_KEYS:
                value = node.get(name)
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    count *= value
    return count


def _pod_name(name: str, role: str) -> str:
    return f"{name}-{role}" if role else name


def asks_for_devices(pod_spec: Mapping[str, Any]) -> bool:
    """Whether a pod spec names claims or asks for any domain-qualified resource (an extended resource)."""
    if pod_spec.get("resourceClaims"):
        return True
    for container in [*mappings(pod_spec.get("containers")), *mappings(pod_spec.get("initContainers"))]:
        resources = container.get("resources")
        for part in ("limits", "requests"):
            amounts = resources.get(part) if isinstance(resources, Mapping) else None
            if isinstance(amounts, Mapping) and any("/" in str(name) for name in amounts):
                return True
    return False


def mappings(value: Any) -> list[Mapping[str, Any]]:
    """The mappings of a list from the input (containers); anything else in it is not a container."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []
