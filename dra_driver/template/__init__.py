"""`dra-driver template`'s library: from what a person wants to a checked ResourceClaimTemplate.

    template(TemplateRequest(intent, source)) -> TemplateResult

intent.py parses the wishes, resolve.py turns them into shipped DeviceClasses,
CEL selectors, a matchAttribute constraint and NVIDIA sharing config,
document.py writes the commented YAML, and this module checks it with explain:
against every shipped hardware profile (a request no known hardware can hold is
a TemplateError naming the nearest devices, known.py) and, when asked, against
a fleet (how many nodes could hold it now and why the others cannot).
`cli/template.py` only parses arguments and prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from dra_driver.allocator import build_pools
from dra_driver.allocator.report import node_summary
from dra_driver.sources.fleet import Fleet
from dra_driver.template.document import build_document, to_yaml
from dra_driver.template.intent import (
    DeviceWant,
    Intent,
    Problems,
    Sharing,
    check_names,
    parse_fallback,
    parse_share_memory,
    parse_sharing,
    parse_want,
)
from dra_driver.template.known import KnownKind, known_fleet, known_kinds, nearest
from dra_driver.template.resolve import Resolved, resolve
from dra_driver.model.resource_v1 import ResourceClaim, ResourceClaimTemplate
from dra_driver.sources.claims import parse_object
from dra_driver.common.errors import UsageError
from dra_driver.explain import ClaimInput, FeatureGates, Subject, explain_subject
from dra_driver.sources.fleet_source import FleetSource, fleet_nodes, load_fleet
from dra_driver.ingest.errors import InputError
from dra_driver.sources.classes import shipped_class_documents
from dra_driver.explain.gates import DEFAULT_KUBERNETES_VERSION, parse_gates, release_of

__all__ = [
    "DeviceWant",
    "FleetCheck",
    "Intent",
    "Problems",
    "Sharing",
    "TemplateError",
    "TemplateRequest",
    "TemplateResult",
    "parse_fallback",
    "parse_share_memory",
    "parse_sharing",
    "parse_want",
    "template",
]


class TemplateError(UsageError):
    """No known hardware could hold what was asked; the message names the nearest known devices."""


@dataclass(frozen=True)
class TemplateRequest:
    intent: Intent
    source: FleetSource | None = None  # a fleet to check the result against
    hardware_check: bool = True  # explain against every shipped profile first
    kubernetes_version: str | None = None  # --kubernetes-version; None: the checked cluster's own release, else 1.35


# A ResourceClaimTemplate gives each pod a claim of its own: sharing settings then stay inside one pod.
TEMPLATE_SHARES_NOTHING = (
    "--sharing on a ResourceClaimTemplate shares nothing across pods: each pod gets its own claim and its own "
    "GPU, and the setting applies to that pod's containers only. To share one GPU between pods, write a ResourceClaim "
    "(add --claim) and name it in each pod's spec.resourceClaims[].resourceClaimName (those pods then run on the node "
    "that holds it), or give each pod's claim a share of a GPU with --share-memory (nodes running --consumable-gpu-memory)"
)


@dataclass
class FleetCheck:
    sources: list[str]
    nodes: int
    fitting: list[str]  # nodes that could hold the claim now
    lines: list[str]  # the concise explain summary: how many fit, why the others cannot
    error: str | None = None  # a scheduler error (CEL runtime error): no node can take it


@dataclass
class TemplateResult:
    text: str  # the YAML, with comments
    document: dict[str, Any]
    resolved: Resolved
    fleet: FleetCheck | None = None
    notes: list[str] = field(default_factory=list)


def _subject(document: dict[str, Any]) -> Subject:
    """The written object read back the way explain reads a user's file (the same schema checks)."""
    label = f"{document['kind']} {document['metadata']['name']}"
    parsed = parse_object(document, label)
    if isinstance(parsed, list):  # our own output failed the schema: a bug, reported with the field paths
        raise InputError(parsed)
    assert isinstance(parsed, (ResourceClaim, ResourceClaimTemplate))  # template writes only these two kinds
    namespace = document["metadata"].get("namespace") or "default"
    spec = parsed.spec.spec if isinstance(parsed, ResourceClaimTemplate) else parsed.spec
    return Subject(claims=[ClaimInput(f"{label}.spec", spec, document["metadata"]["name"], namespace)])


def _impossible(resolved: Resolved, profiles: int) -> TemplateError:
    lines = [
        f"no known hardware could hold this claim (explained against the {profiles} shipped hardware profiles, static and dynamic partitioning); "
        "nearest known devices:"
    ]
    kinds = known_kinds()
    for index, choice in enumerate(resolved.choices):
        lines.append(f"  choice {index + 1}, {choice.want.describe()}:")
        lines += [f"    {line}" for line in nearest(choice.want, kinds)]
    lines.append("Relax the request, or give --no-hardware-check for hardware newer than the shipped profiles.")
    return TemplateError("\n".join(lines))


def _classes_missing(fleet: Fleet, resolved: Resolved) -> list[str]:
    """The shipped classes the claim names that a fleet with classes of its own (a cluster, a dump) lacks."""
    if not (fleet.cluster or fleet.classes):
        return []  # explain adds the shipped ones to fleet files without classes, and says so
    present = {str((doc.get("metadata") or {}).get("name")) for doc in fleet.classes}
    return sorted({choice.device_class for choice in resolved.choices} - present)


def _unfit_choices(intent: Intent, resolved: Resolved, kinds: Sequence[KnownKind], shipped: set[str], gates: FeatureGates) -> list[str]:
    """A note per firstAvailable choice that no shipped profile could hold on its own: the claim as a whole
    fits (an earlier or later choice does), but that choice can never be the one allocated on known hardware."""
    notes: list[str] = []
    for index, choice in enumerate(resolved.choices):
        alone = replace(intent, wants=(choice.want,))
        problems = Problems()
        single = resolve(alone, problems, kinds, shipped, True)
        if problems.errors:  # e.g. --same that this choice alone cannot take: the full claim was checked already
            continue
        subject = _subject(yaml.safe_load(to_yaml(build_document(alone, single))))
        if explain_subject(known_fleet(), subject, gates=gates).explanation.allocatable:
            continue
        nearest_kinds = "; ".join(nearest(choice.want, kinds))
        notes.append(
            f"choice {index + 1}, {choice.want.describe()}, fits no shipped hardware profile (static or dynamic "
            f"partitioning), so it is never the one allocated there; nearest known devices: {nearest_kinds}"
        )
    return notes


def template(request: TemplateRequest) -> TemplateResult:
    """Build, validate and check the claim; InputError for bad wishes, TemplateError when no known hardware fits."""
    intent = request.intent
    problems = Problems()
    check_names(intent, problems)
    needs_catalog = request.hardware_check or any(w.model for w in intent.wants)
    kinds = known_kinds() if needs_catalog else ()
    shipped = {str((d.get("metadata") or {}).get("name")) for d in shipped_class_documents()}
    resolved = resolve(intent, problems, kinds, shipped, request.hardware_check)
    if problems.errors:
        raise InputError(problems.errors)
    text = to_yaml(build_document(intent, resolved))
    document = yaml.safe_load(text)
    subject = _subject(document)
    result = TemplateResult(text, document, resolved)
    if intent.sharing is not None and not intent.as_claim and not intent.share_memory:
        result.notes.append(TEMPLATE_SHARES_NOTHING)
    # A share exists only under DRAConsumableCapacity: checked as on a cluster that runs it; explain's
    # note says when a fleet's devices would each go whole to one claim instead.
    gates = parse_gates("DRAConsumableCapacity=true" if intent.share_memory else None, request.kubernetes_version or DEFAULT_KUBERNETES_VERSION)
    if request.hardware_check:
        known = known_fleet()
        if not explain_subject(known, subject, gates=gates).explanation.allocatable:
            raise _impossible(resolved, len({s for k in kinds for s in k.profiles}))
        if len(resolved.choices) > 1:
            result.notes += _unfit_choices(intent, resolved, kinds, shipped, gates)
    if request.source is not None:
        fleet = load_fleet(request.source)
        missing = _classes_missing(fleet, resolved)
        if missing:  # a cluster (or a dump of one) without the shipped classes: no node can hold it there
            nodes = len(fleet_nodes(build_pools(fleet.slices), fleet.nodes))
            error = f"the fleet has no DeviceClass {', '.join(missing)}: install the shipped classes (deviceclasses/, as deploy/ does)"
            result.fleet = FleetCheck(fleet.sources, nodes, [], [], error)
            return result
        fleet_gates = gates
        if fleet.cluster and request.kubernetes_version is None:
            version, note = release_of(fleet.server_version)
            fleet_gates = gates.at_version(version)
            if note:
                result.notes.append(note)
        checked = explain_subject(fleet, _subject(document), gates=fleet_gates)  # a fresh subject: explain adds its notes to it
        explanation = checked.explanation
        result.notes += list(checked.notes)
        fitting = [o.node for o in explanation.nodes if o.allocated and not o.error]
        result.fleet = FleetCheck(fleet.sources, len(explanation.nodes), fitting, node_summary(explanation), explanation.error)
    return result
