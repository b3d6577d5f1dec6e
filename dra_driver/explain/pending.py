"""Why each unallocated ResourceClaim of a cluster is still pending, as one word from a fixed set.

explain's engine (the allocator with its per-device reasons) is run once per pending claim against the
fleet, with every allocated claim's devices in use, and its answer is folded into a bounded reason, so
a metric labelled with it (dra_fleet_claims_pending{reason}) cannot grow with the cluster:

- class-missing: a request names a DeviceClass the cluster does not have;
- invalid: the claim breaks a rule the API server checks (it cannot have been stored by a current server);
- no-matching-device: some request's selectors (its class's and its own) match no device on any node;
- insufficient-devices: devices match, but too few are free on any one node (held by other claims,
  tainted, their shared counters or consumable capacity used up);
- constraint: on some node every request has enough usable devices on its own, but no combination
  meets the claim's constraints and shared counters together;
- allocatable: explain finds devices for it now: it waits for a pod that uses it to be scheduled (or the
  pod's other filters, which a claim alone does not show, keep it off the nodes);
- other: the scheduler would fail it with an error (a CEL runtime error), or the search hit its step limit;
- unexamined: beyond the `limit` of claims explained per refresh (the oldest are explained first).

A claim's reason is what the engine reports for the fleet it was given; node selection by the pod
(nodeSelector, affinity) is not known without the pod and is not judged here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.allocator import Allocator, CelMatcher, DeviceClassSpec, Explanation, Node
from dra_driver.allocator.capacity import ConsumableCapacity, shared_consumption
from dra_driver.allocator.types import Pool
from dra_driver.sources.classes import ClassLayer, merge_classes
from dra_driver.ingest.errors import InputError
from dra_driver.explain.gates import FeatureGates
from dra_driver.sources import fleet as fleets
from dra_driver.model.resource_v1 import ResourceClaim
from dra_driver.model.resource_v1_validation import claim_spec_errors
from dra_driver.sources.claims import parse_object, to_claim

REASONS = ("class-missing", "invalid", "no-matching-device", "insufficient-devices", "constraint", "allocatable", "other", "unexamined")
DEFAULT_LIMIT = 200  # pending claims explained per refresh: a failing claim walks every device of every node
# Rejections that mean "the device is not one the request selects", as opposed to "selected but not usable now".
_NOT_SELECTED = frozenset({"selector", "cel-error", "pool"})
_CONSTRAINT_LEAD = "every request has enough usable devices on its own"


@dataclass(frozen=True)
class PendingClaim:
    namespace: str
    name: str
    created: str  # metadata.creationTimestamp (RFC 3339), "" when missing
    reason: str


def cluster_classes(docs: Sequence[Mapping[str, Any]], matcher: CelMatcher) -> tuple[dict[str, DeviceClassSpec], int]:
    """The cluster's DeviceClasses that are valid, and how many were not (each class checked on its own, so one
    bad class costs only itself)."""
    out: dict[str, DeviceClassSpec] = {}
    invalid = 0
    for doc in docs:
        try:
            out.update(merge_classes([ClassLayer("cluster", [doc])], matcher))
        except InputError:
            invalid += 1
    return out, invalid


def is_pending(claim: Mapping[str, Any]) -> bool:
    """Not allocated and not being deleted."""
    meta = claim.get("metadata") or {}
    status = claim.get("status") or {}
    return not (isinstance(status, Mapping) and status.get("allocation")) and not (isinstance(meta, Mapping) and meta.get("deletionTimestamp"))


def pending_claims(
    fleet: fleets.Fleet,
    pools: Sequence[Pool],
    nodes: Sequence[Node],
    classes: Mapping[str, DeviceClassSpec],
    matcher: CelMatcher,
    gates: FeatureGates = FeatureGates(),
    limit: int = DEFAULT_LIMIT,
) -> list[PendingClaim]:
    """Every pending claim of `fleet.claims` with its reason; pools, nodes and classes built once by the caller."""
    waiting = sorted((c for c in fleet.claims if is_pending(c)), key=_created)
    # Pending claims hold nothing, so the devices in use are the same for each of them: one allocator for all.
    allocated = fleets.allocated_devices(fleet.claims)
    capacity = ConsumableCapacity(gates.consumable_capacity, shared_consumption(fleet.claims))
    allocator = Allocator(pools, classes, matcher, allocated, capacity=capacity)
    out = []
    by_spec: dict[str, str] = {}  # claims of one template share a spec, hence a reason: explained once
    for index, claim in enumerate(waiting):
        meta = claim.get("metadata") or {}
        spec_key = json.dumps(claim.get("spec"), sort_keys=True, default=str)
        if index >= limit:
            reason = "unexamined"
        elif spec_key in by_spec:
            reason = by_spec[spec_key]
        else:
            reason = by_spec[spec_key] = _reason(claim, classes, matcher, allocator, nodes)
        out.append(PendingClaim(str(meta.get("namespace") or ""), str(meta.get("name") or ""), _created(claim), reason))
    return out


def _created(claim: Mapping[str, Any]) -> str:
    return str((claim.get("metadata") or {}).get("creationTimestamp") or "")


def _reason(
    claim: Mapping[str, Any], classes: Mapping[str, DeviceClassSpec], matcher: CelMatcher, allocator: Allocator, nodes: Sequence[Node]
) -> str:
    meta = claim.get("metadata") or {}
    label = f"ResourceClaim {meta.get('namespace')}/{meta.get('name')}"
    parsed = parse_object({**claim, "kind": "ResourceClaim"}, label, from_server=True)
    if not isinstance(parsed, ResourceClaim):
        return "invalid"
    errors = claim_spec_errors(parsed.spec, f"{label}.spec", classes, matcher.compile_problem)
    if errors:
        return "class-missing" if any("does not exist" in e.message and e.path.endswith("deviceClassName") for e in errors) else "invalid"
    spec = to_claim(parsed.spec, parsed.metadata.name, parsed.metadata.namespace or "default")
    # Node by node, stopping at the first that allocates it: an allocatable claim costs one node, not the fleet.
    explanations = []
    for node in nodes:
        explanation = allocator.explain([spec], [node])
        if explanation.allocatable:
            return "allocatable"
        explanations.append(explanation)
    return explanation_reason(explanations)


def explanation_reason(explanations: Sequence[Explanation]) -> str:
    """The engine's answers for one claim (one per node, or one for all), folded into one of REASONS."""
    if any(e.allocatable for e in explanations):
        return "allocatable"
    outcomes = [o for e in explanations for o in e.nodes]
    if any(e.error for e in explanations) or any(o.reasons and o.reasons[0].startswith("search stopped") for o in outcomes):
        return "other"
    by_request: dict[tuple[str, str], bool] = {}  # (claim, request) -> some alternative selects a device somewhere
    for report in (r for e in explanations for r in e.alternatives):
        selects = any(m.matched or any(r.code not in _NOT_SELECTED for _, r in m.rejected) for m in report.nodes.values())
        by_request[(report.claim, report.request)] = by_request.get((report.claim, report.request), False) or selects
    if not all(by_request.values()):
        return "no-matching-device"
    if any(o.reasons and o.reasons[0].startswith(_CONSTRAINT_LEAD) for o in outcomes):
        return "constraint"
    return "insufficient-devices"
