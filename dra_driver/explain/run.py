"""One explain run: fleet + classes + the file's claims -> the allocator's explanation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver import fleet as fleets
from dra_driver.allocator import Allocator, CelMatcher, Explanation, Node, NodeOutcome, build_pools
from dra_driver.allocator.capacity import ConsumableCapacity, shared_consumption
from dra_driver.allocator.pools import node_selector_matches
from dra_driver.errors import FieldError
from dra_driver.explain.admin_access import admin_access_problems
from dra_driver.explain.classes import merge_classes, shipped_class_documents
from dra_driver.explain.errors import InputError
from dra_driver.explain.extended_resources import class_for_resources, extended_resource_claims, insufficient, pod_extended_requests
from dra_driver.explain.fleet_source import FleetSource, fleet_nodes, load_fleet
from dra_driver.explain.gates import FeatureGates
from dra_driver.explain.search_size import timeout_warnings
from dra_driver.explain.subject import Subject, read_subject, validated_claims
from dra_driver.explain.taint_rules import apply_rules, parse_rules


@dataclass(frozen=True)
class ExplainRequest:
    """What `dra-driver explain` was asked: the claim file, the fleet, extra DeviceClass files."""

    file: str
    source: FleetSource
    class_paths: Sequence[str] = ()
    gates: FeatureGates = FeatureGates()
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # --namespace-labels (admin access)


@dataclass
class ExplainResult:
    explanation: Explanation
    summary: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the scheduler will likely time out (search_size.py)


def split_nodes(
    nodes: Sequence[Node],
    reused: Mapping[str, Mapping[str, Any] | None],
    plugin_needs: Mapping[str, int],
    allocatable: Mapping[str, Mapping[str, Any]],
) -> tuple[list[Node], list[NodeOutcome]]:
    """Nodes the scheduler's other filters let the pod onto, and an outcome in its words for the rest.

    An allocated claim the pod reuses is usable only where its status.allocation.nodeSelector
    matches (unset: everywhere); extended resources left to device plugins need the node's
    allocatable (extended_resources.py)."""
    usable: list[Node] = []
    elsewhere: list[NodeOutcome] = []
    for node in nodes:
        missing = [label for label, selector in reused.items() if selector is not None and not node_selector_matches(selector, node)]
        reasons = [f"resourceclaim not available on the node: {label} is allocated for another node" for label in missing]
        reasons += insufficient(plugin_needs, allocatable.get(node.name) or {})
        if reasons:
            elsewhere.append(NodeOutcome(node.label, reasons=reasons))
        else:
            usable.append(node)
    return usable, elsewhere


def explain(request: ExplainRequest) -> ExplainResult:
    """Allocate the file's claims on the fleet as kube-scheduler would; InputError for bad input."""
    fleet = load_fleet(request.source)
    subject = read_subject(request.file, fleet.claims)
    extra = fleets.load_paths(request.class_paths) if request.class_paths else fleets.Fleet()
    if extra.slices or extra.claims:
        raise InputError([FieldError("--classes", "may only hold DeviceClass objects")])
    subject.namespace_labels.update({name: dict(labels) for name, labels in request.namespace_labels.items()})
    return explain_subject(fleet, subject, [("--classes", extra.classes), (request.file, subject.classes)], request.gates, unknown_namespaces_unlabelled=True)


def explain_subject(
    fleet: fleets.Fleet,
    subject: Subject,
    class_layers: Sequence[tuple[str, list[dict[str, Any]]]] = (),
    gates: FeatureGates = FeatureGates(),
    unknown_namespaces_unlabelled: bool = False,
) -> ExplainResult:
    """Allocate claims already read (a Subject) on a loaded fleet; `class_layers` go over the shipped and fleet classes.

    `unknown_namespaces_unlabelled`: admin access in a namespace whose labels are not known is
    refused as the API server refuses it in an unlabelled one (else only noted)."""
    matcher = CelMatcher(consumable_capacity=gates.consumable_capacity)
    layers = [("shipped", shipped_class_documents()), ("fleet", fleet.classes), *class_layers]
    classes = merge_classes(layers, matcher)
    # The scheduler maps extended resources with the classes that exist: a cluster's own, not
    # the shipped ones explain otherwise assumes installed (deploy/ installs them).
    mapping_layers = layers[1:] if fleet.cluster else layers
    plugin_needs = _add_extended_resource_claims(subject, mapping_layers, set(classes), gates)
    claims = validated_claims(subject, classes, matcher)
    namespaces = {**fleet.namespace_labels, **subject.namespace_labels}
    admin_errors, admin_notes = admin_access_problems(subject.claims, namespaces, gates, unknown_namespaces_unlabelled)
    if admin_errors:
        raise InputError(admin_errors)
    subject.notes += admin_notes
    rules, rule_errors = parse_rules([*fleet.taint_rules, *subject.taint_rules], "DeviceTaintRules")
    if rule_errors:
        raise InputError(rule_errors)
    pools = build_pools(fleet.slices)
    subject.notes += apply_rules(pools, rules, gates)
    nodes = fleet_nodes(pools, fleet.nodes)
    others = [*fleet.claims, *subject.allocated_claims]
    allocated = fleets.allocated_devices(others, skip=subject.own_claims)
    capacity = ConsumableCapacity(gates.consumable_capacity, shared_consumption(others, skip=subject.own_claims))
    usable, elsewhere = split_nodes(nodes, subject.reused, plugin_needs, fleet.allocatable)
    explanation = Allocator(pools, classes, matcher, allocated, capacity=capacity).explain(claims, usable)
    explanation.nodes += elsewhere
    summary = {
        "sources": fleet.sources,
        "nodes": len(nodes),
        "pools": len(pools),
        "devices": sum(len(p.devices) for p in pools),
        "allocatedElsewhere": len(allocated),
        "celEvaluations": matcher.evaluations,
        "featureGates": gates.describe(),
        "celEnvironments": {"validation": matcher.validation.describe(), "matching": matcher.scheduling.describe()},
    }
    return ExplainResult(explanation, summary, subject.notes, timeout_warnings(explanation, pools))


def _add_extended_resource_claims(subject: Subject, layers: Sequence[tuple[str, list[dict[str, Any]]]], known: set[str], gates: FeatureGates) -> dict[str, int]:
    """The claim the scheduler adds for the extended resources the file's Pods ask for (extended_resources.py);
    returns what device plugins must give (resource -> count)."""
    extended = [r for pod in subject.pods for r in pod_extended_requests(pod)]
    if not extended:
        return {}
    merged = list({str((d.get("metadata") or {}).get("name")): d for _, docs in layers for d in docs}.values())
    found = extended_resource_claims(extended, class_for_resources(merged), known, gates)
    subject.claims += found.claims
    subject.notes += found.notes
    needs: dict[str, int] = {}
    for per_pod in found.plugin.values():
        for resource, count in per_pod.items():
            needs[resource] = needs.get(resource, 0) + count
    return needs
