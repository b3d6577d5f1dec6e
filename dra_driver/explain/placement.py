"""Pods placed as kube-scheduler places them: one after another, each on one node.

A pod's claims are allocated together on the first node (by name) its other filters let it
onto; what it got is in use for the pods after it, and a ResourceClaim it got allocated is
shared by a later pod that names it, tying that pod to its node. A file of claims (no pods)
is one placement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.sources import fleet as fleets
from dra_driver.allocator import Allocator, CelMatcher, ClaimSpec, DeviceClassSpec, Explanation, Node, NodeOutcome
from dra_driver.allocator.capacity import ConsumableCapacity, shared_consumption
from dra_driver.allocator.pools import node_selector_matches
from dra_driver.allocator.types import Pool
from dra_driver.explain.extended_resources import ExtendedResources, insufficient, replaced_by_dra
from dra_driver.explain.gates import FeatureGates
from dra_driver.explain.node_affinity import NodeConstraints, pod_constraints
from dra_driver.explain.subject import ClaimInput, Subject


def split_nodes(
    nodes: Sequence[Node],
    reused: Mapping[str, Mapping[str, Any] | None],
    plugin_needs: Mapping[str, int],
    allocatable: Mapping[str, Mapping[str, Any]],
    constraints: NodeConstraints = NodeConstraints(),
) -> tuple[list[Node], list[NodeOutcome]]:
    """Nodes the scheduler's other filters let the pod onto, and an outcome in its words for the rest.

    The pod's own node name, selector and required affinity (node_affinity.py); an allocated
    claim the pod reuses is usable only where its status.allocation.nodeSelector matches
    (unset: everywhere); extended resources left to device plugins need the node's
    allocatable (extended_resources.py)."""
    usable: list[Node] = []
    elsewhere: list[NodeOutcome] = []
    for node in nodes:
        reasons = constraints.reasons(node)
        missing = [label for label, selector in reused.items() if selector is not None and not node_selector_matches(selector, node)]
        reasons += [f"resourceclaim not available on the node: {label} is allocated for another node" for label in missing]
        reasons += insufficient(plugin_needs, allocatable.get(node.name) or {})
        if reasons:
            elsewhere.append(NodeOutcome(node.label, reasons=reasons))
        else:
            usable.append(node)
    return usable, elsewhere


@dataclass
class Placement:
    """What is allocated together on one node: one pod's claims, or the file's claims."""

    label: str
    claims: list[ClaimInput]
    reused: dict[str, dict[str, Any] | None]
    plugin_needs: dict[str, int] = field(default_factory=dict)  # extended resources device plugins must give
    constraints: NodeConstraints = NodeConstraints()  # the pod's node name, selector and required affinity


def placements(subject: Subject, extended: ExtendedResources, labels_known: bool) -> list[Placement]:
    """One placement per pod; `labels_known`: the fleet has Node objects, so the pods' node constraints are checked."""
    if not subject.pod_plans:
        return [Placement("", subject.claims, subject.reused)]
    out: list[Placement] = []
    unchecked: list[str] = []
    unknown_resources: set[str] = set()
    for plan in subject.pod_plans:
        claims = plan.claims + ([extended.claims[plan.key]] if plan.key in extended.claims else [])
        constraints = pod_constraints(plan.doc)
        needs = extended.plugin.get(plan.key, {})
        if not labels_known:
            if constraints.selectors:  # node names are known without Node objects, labels are not
                unchecked.append(plan.key)
                constraints = NodeConstraints(constraints.node_name)
            unknown_resources |= {r for r in needs if not replaced_by_dra(r)}
            needs = {r: n for r, n in needs.items() if replaced_by_dra(r)}
        out.append(Placement(plan.label, claims, dict(plan.reused), needs, constraints))
    if unchecked:
        subject.notes.append(
            f"node selector / affinity of {len(unchecked)} pod(s) not checked ({unchecked[0]}{', ...' if len(unchecked) > 1 else ''}): "
            f"{_NO_NODES}, so explain does not know the nodes' labels (use --kubeconfig, or add Node documents to --fleet)"
        )
    if unknown_resources:
        subject.notes.append(
            f"{', '.join(sorted(unknown_resources))} not checked: {_NO_NODES}, so explain does not know which device plugins the nodes run (use "
            "--kubeconfig, or add Node documents with status.allocatable to --fleet)"
        )
    return out


_NO_NODES = "the fleet has no Node objects"


class Scheduler:
    """Places pods one after another: the devices (and shared capacity) each placed pod got are in use for the next."""

    def __init__(
        self,
        pools: Sequence[Pool],
        classes: Mapping[str, DeviceClassSpec],
        matcher: CelMatcher,
        nodes: Sequence[Node],
        allocatable: Mapping[str, Mapping[str, Any]],
        others: Sequence[Mapping[str, Any]],
        own_claims: set[str],
        gates: FeatureGates,
    ) -> None:
        self.pools, self.classes, self.matcher, self.nodes, self.allocatable = pools, classes, matcher, nodes, allocatable
        self.claim_docs = list(others)  # allocated claims: the fleet's, the file's, then each placed pod's
        self.own_claims, self.gates = own_claims, gates
        self.placed: dict[str, dict[str, Any] | None] = {}  # claim label -> its allocation's nodeSelector

    def place(self, placement: Placement, specs: Mapping[int, ClaimSpec]) -> Explanation:
        reused = dict(placement.reused)
        claims: list[ClaimSpec] = []
        for claim in placement.claims:
            label = f"{claim.namespace}/{claim.name}"
            if label in self.placed:  # a ResourceClaim an earlier pod got allocated: this pod shares it
                reused[label] = self.placed[label]
            else:
                claims.append(specs[id(claim)])
        allocated = fleets.allocated_devices(self.claim_docs, skip=self.own_claims)
        capacity = ConsumableCapacity(self.gates.consumable_capacity, shared_consumption(self.claim_docs, skip=self.own_claims))
        usable, elsewhere = split_nodes(self.nodes, reused, placement.plugin_needs, self.allocatable, placement.constraints)
        explanation = Allocator(self.pools, self.classes, self.matcher, allocated, capacity=capacity).explain(claims, usable)
        explanation.nodes += elsewhere
        chosen = explanation.chosen
        for label, allocation in (chosen.allocations if chosen else {}).items():
            namespace, _, name = label.rpartition("/")
            self.claim_docs.append({"metadata": {"namespace": namespace, "name": name}, "status": {"allocation": allocation}})
            selector = allocation.get("nodeSelector")
            self.placed[label] = dict(selector) if isinstance(selector, Mapping) else None
        return explanation
