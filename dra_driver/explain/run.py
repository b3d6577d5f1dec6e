"""One explain run: fleet + classes + the file's claims -> the allocator's explanation."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dra_driver.sources import fleet as fleets
from dra_driver.allocator import CelMatcher, ClaimSpec, Explanation, build_pools
from dra_driver.common.errors import DraError, FieldError
from dra_driver.explain.admin_access import admin_access_problems
from dra_driver.sources.classes import SHIPPED, ClassLayer, merge_classes, shipped_class_documents
from dra_driver.explain.constraint_hints import constraint_hints
from dra_driver.ingest.errors import InputError
from dra_driver.explain.extended_resources import ExtendedResources, class_for_resources, extended_resource_claims, pod_extended_requests
from dra_driver.sources.fleet_source import FleetSource, fleet_nodes, load_fleet
from dra_driver.explain.gates import FeatureGates, release_of
from dra_driver.explain.placement import Scheduler, placements
from dra_driver.explain.search_size import timeout_warnings
from dra_driver.explain.sharing import sharing_notes
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
    version_given: bool = False  # --kubernetes-version was given; otherwise a cluster's own release replaces the default


@dataclass
class PodResult:
    """One pod of the file, placed after the ones before it."""

    pod: str  # "Pod ml/trainer (Deployment ml/trainer, replica 1 of 2)"
    explanation: Explanation


@dataclass
class ExplainResult:
    explanation: Explanation  # the first pod that cannot be placed, else the last one (or the file's claims)
    summary: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the scheduler will likely time out (search_size.py)
    pods: list[PodResult] = field(default_factory=list)  # every pod in placement order; empty for a file of claims

    @property
    def allocatable(self) -> bool:
        return all(pod.explanation.allocatable for pod in self.pods) if self.pods else self.explanation.allocatable


def explain(request: ExplainRequest) -> ExplainResult:
    """Allocate the file's claims on the fleet as kube-scheduler would; InputError for bad input."""
    fleet = load_fleet(request.source)
    subject = read_subject(request.file, fleet.claims)
    extra = fleets.load_paths(request.class_paths) if request.class_paths else fleets.Fleet()
    if extra.slices or extra.claims:
        raise InputError([FieldError("--classes", "may only hold DeviceClass objects")])
    subject.namespace_labels.update({name: dict(labels) for name, labels in request.namespace_labels.items()})
    layers = [ClassLayer("--classes", extra.classes, extra.class_origins), ClassLayer(request.file, subject.classes, subject.class_origins)]
    gates = request.gates
    if fleet.cluster and not request.version_given:
        version, note = release_of(fleet.server_version)
        gates = gates.at_version(version)
        if note:
            subject.notes.append(note)
    untouched = copy.deepcopy(subject) if _static_profile(request.source) else None  # explain_subject adds to a subject
    result = explain_subject(fleet, subject, layers, gates, unknown_namespaces_unlabelled=True)
    if untouched is not None and not result.allocatable:
        result.notes += _dynamic_partitioning_hint(request, untouched, layers, gates)
    return result


def _static_profile(source: FleetSource) -> bool:
    return bool(source.profile) and source.partitioning == "static"


def _dynamic_partitioning_hint(
    request: ExplainRequest, subject: Subject, layers: Sequence[ClassLayer], gates: FeatureGates
) -> list[str]:
    """What a simulated fleet that fails statically would do with dynamic partitioning: a MIG or partition claim
    often needs nodes that create partitions on demand, and nothing else tells a user that the flag exists."""
    source = replace(request.source, partitioning="dynamic")
    try:
        dynamic = explain_subject(load_fleet(source), subject, layers, gates, unknown_namespaces_unlabelled=True)
    except DraError:
        return []
    if not dynamic.allocatable:
        return []
    explanations = [pod.explanation for pod in dynamic.pods] or [dynamic.explanation]
    matching = len({device for e in explanations for report in e.alternatives for matches in report.nodes.values() for device in matches.matched})
    return [
        f"with --partitioning dynamic (nodes running `dra-driver run --partitioning dynamic`, which create MIG devices and "
        f"partitions on demand) {matching} devices of profile {request.source.profile} match and it is allocatable"
    ]


def explain_subject(
    fleet: fleets.Fleet,
    subject: Subject,
    class_layers: Sequence[ClassLayer] = (),
    gates: FeatureGates = FeatureGates(),
    unknown_namespaces_unlabelled: bool = False,
) -> ExplainResult:
    """Allocate claims already read (a Subject) on a loaded fleet; `class_layers` go over the shipped and fleet classes.

    The file's pods are placed one after another, as the scheduler takes them: each on its own
    node, with what the pods before it got in use. `unknown_namespaces_unlabelled`: admin access
    in a namespace whose labels are not known is refused as the API server refuses it in an
    unlabelled one (else only noted)."""
    matcher = CelMatcher(consumable_capacity=gates.consumable_capacity)
    layers = [*_shipped_layer(fleet), ClassLayer("fleet", fleet.classes, fleet.class_origins), *class_layers]
    classes = merge_classes(layers, matcher)
    mapping_layers = layers  # the scheduler maps extended resources with the classes that exist
    to_place = placements(subject, _extended_resources(subject, mapping_layers, set(classes), gates), labels_known=bool(fleet.nodes))
    specs = dict(zip(map(id, subject.claims), validated_claims(subject, classes, matcher)))
    namespaces = {**fleet.namespace_labels, **subject.namespace_labels}
    admin_errors, admin_notes = admin_access_problems(subject.claims, namespaces, gates, unknown_namespaces_unlabelled)
    if admin_errors:
        raise InputError(admin_errors)
    subject.notes += admin_notes
    rules, rule_errors = parse_rules([*fleet.taint_rules, *subject.taint_rules], "DeviceTaintRules")
    if rule_errors:
        raise InputError(rule_errors)
    pools = build_pools(fleet.slices)
    subject.notes += [note for note in fleet.notes if note not in subject.notes]  # a slice given twice (sources/fleet.py)
    subject.notes += apply_rules(pools, rules, gates)
    subject.notes += sharing_notes(list(specs.values()), pools, gates)
    subject.notes += _shipped_note(list(specs.values()), layers, fleet)
    subject.notes += constraint_hints(list(specs.values()), pools)
    nodes = fleet_nodes(pools, fleet.nodes)
    others = [*fleet.claims, *subject.allocated_claims]
    scheduler = Scheduler(pools, classes, matcher, nodes, fleet.allocatable, others, subject.own_claims, gates)
    pods = [PodResult(placement.label, scheduler.place(placement, specs)) for placement in to_place]
    summary = {
        "sources": fleet.sources,
        "nodes": len(nodes),
        "pools": len(pools),
        "devices": sum(len(p.devices) for p in pools),
        "allocatedElsewhere": len(fleets.allocated_devices(others, skip=subject.own_claims)),
        "celEvaluations": matcher.evaluations,
        "featureGates": gates.describe(),
        "kubernetesVersion": gates.kubernetes_version,
        "deviceOrder": gates.device_order(),
        "celEnvironments": {"validation": matcher.validation.describe(), "matching": matcher.scheduling.describe()},
    }
    decisive = next((pod.explanation for pod in pods if not pod.explanation.allocatable), pods[-1].explanation)
    warnings = [w for pod in pods for w in timeout_warnings(pod.explanation, pools)]
    return ExplainResult(decisive, summary, subject.notes, warnings, pods if subject.pod_plans else [])


def _shipped_layer(fleet: fleets.Fleet) -> list[ClassLayer]:
    """The shipped DeviceClasses, where the fleet does not say which classes exist.

    A cluster, or files that hold DeviceClasses (a dump of one), has exactly its own: the shipped
    ones are not added, as the scheduler there would not find them. A simulated node runs this
    driver, whose install brings them (deploy/); files with slices only get them too, said by
    _shipped_note when a claim uses one."""
    return [] if fleet.cluster or fleet.classes else [ClassLayer(SHIPPED, shipped_class_documents())]


def _shipped_note(specs: Sequence[ClaimSpec], layers: Sequence[ClassLayer], fleet: fleets.Fleet) -> list[str]:
    """Which classes the claims use that only the shipped layer brings (fleet files without DeviceClasses)."""
    if fleet.simulated:
        return []
    names: dict[str, set[str]] = {}
    for layer in layers:
        names.setdefault(layer.source, set()).update(str((d.get("metadata") or {}).get("name")) for d in layer.docs)
    others = set().union(*(found for source, found in names.items() if source != SHIPPED))
    used = {alternative.class_name for spec in specs for request in spec.requests for alternative in request.alternatives}
    only_shipped = sorted(used & names.get(SHIPPED, set()) - others)
    if not only_shipped:
        return []
    return [
        f"DeviceClass {', '.join(only_shipped)}: the fleet files hold no DeviceClasses, so explain adds the shipped ones "
        "(deviceclasses/, what deploy/ installs) as if the cluster had them; put the cluster's DeviceClasses in the fleet "
        "files (kubectl get deviceclasses -o yaml) to check against those instead"
    ]


def _extended_resources(
    subject: Subject, layers: Sequence[ClassLayer], known: set[str], gates: FeatureGates
) -> ExtendedResources:
    """The claims the scheduler adds for the extended resources the file's Pods ask for, and what device plugins
    must give (extended_resources.py); the claims join subject.claims for validation."""
    extended = [r for pod in subject.pods for r in pod_extended_requests(pod)]
    if not extended:
        return ExtendedResources()
    merged = list({str((d.get("metadata") or {}).get("name")): d for layer in layers for d in layer.docs}.values())
    found = extended_resource_claims(extended, class_for_resources(merged), known, gates)
    subject.claims += found.claims.values()
    subject.notes += found.notes
    return found
