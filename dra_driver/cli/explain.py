"""`dra-driver explain`: would the scheduler allocate this claim on this fleet, and if not, why?

Exit codes: 0 allocatable, 1 not allocatable (including CEL runtime errors),
2 invalid input (claim, class, fleet, arguments), with field paths.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_driver.allocator import Allocator, CelMatcher, ClaimSpec, DeviceClassSpec, Explanation, Node, build_pools, node_names
from dra_driver.allocator.report import to_json, to_text
from dra_driver.claims_input import (
    DeviceClass,
    Pod,
    ResourceClaim,
    ResourceClaimTemplate,
    claim_spec_errors,
    class_spec_errors,
    ResourceClaimSpec,
    parse_object,
    to_claim,
    to_class,
)
from dra_driver.errors import DraError, FieldError, ValidationError
from dra_driver.inputs import read_objects
from dra_driver import fleet as fleets

EXIT_ALLOCATABLE, EXIT_NOT_ALLOCATABLE, EXIT_INVALID = 0, 1, 2


class InputError(DraError):
    """Input that cannot be explained; carries field errors."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="check a ResourceClaim/Template/Pod against a fleet offline and explain the allocation",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", help="YAML/JSON with a ResourceClaim, ResourceClaimTemplate, or a Pod with its templates (and optional DeviceClasses)")
    source = parser.add_argument_group("fleet (one kind)")
    source.add_argument("--fleet", action="append", default=[], metavar="DIR|FILE", help="ResourceSlices: kubectl List, multi-doc YAML, or a directory (repeatable)")
    source.add_argument("--profile", help="simulate a hardware profile on --nodes identical nodes")
    source.add_argument("--nodes", type=int, default=1, help="number of simulated nodes for --profile (default 1)")
    source.add_argument("--partitioning", choices=("static", "dynamic"), default="static", help="MIG/partition publishing mode for --profile")
    source.add_argument("--kubeconfig", help="read slices, classes, claims and nodes from a cluster")
    parser.add_argument("--classes", action="append", default=[], metavar="DIR|FILE", help="extra DeviceClasses; they replace shipped classes of the same name")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text")
    parser.add_argument("--verbose", dest="explain_all", action="store_true", help="list every node and device in text output")
    parser.set_defaults(func=run)


# -- classes --------------------------------------------------------------------------------------


def shipped_class_documents() -> list[dict[str, Any]]:
    """The DeviceClasses shipped with dra-driver (deviceclasses/, listed by its kustomization.yaml).

    Read as plain documents so they go through the same checks as a user's classes.
    """
    from dra_driver.cel.classes import shipped_classes_dir

    try:
        directory = shipped_classes_dir()
    except FileNotFoundError:
        return []  # an installation without them: users bring classes with --classes
    listed = (fleets.read_documents(directory / "kustomization.yaml") or [{}])[0].get("resources") or []
    docs: list[dict[str, Any]] = []
    for name in listed:
        docs += fleets.read_documents(directory / str(name))
    return [d for d in docs if d.get("kind") == "DeviceClass"]


def merge_classes(layers: Sequence[tuple[str, list[dict[str, Any]]]], matcher: CelMatcher) -> dict[str, DeviceClassSpec]:
    """Merge class layers (later replaces earlier by name) and validate the result."""
    merged: dict[str, tuple[str, dict[str, Any]]] = {}
    for source, docs in layers:
        for doc in docs:
            name = str((doc.get("metadata") or {}).get("name", ""))
            merged[name] = (source, doc)
    out: dict[str, DeviceClassSpec] = {}
    errors: list[FieldError] = []
    for name, (source, doc) in merged.items():
        label = f"{source}: DeviceClass {name}"
        parsed = parse_object(doc, label)
        if isinstance(parsed, list):
            errors += parsed
            continue
        assert isinstance(parsed, DeviceClass)
        errors += class_spec_errors(parsed, label, matcher.compile_problem)
        out[name] = to_class(parsed)
    if errors:
        raise InputError(errors)
    return out


# -- claims ---------------------------------------------------------------------------------------


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
            if (claim.status or {}).get("allocation"):
                subject.notes.append(f"ResourceClaim {namespace}/{claim.metadata.name} is already allocated; its devices stay in use and it is not allocated again")
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
    pods = [(label, obj) for label, obj in parsed if isinstance(obj, Pod)]
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
    if not subject.claims and not subject.notes:
        raise InputError([FieldError(path, "holds no ResourceClaim, ResourceClaimTemplate or Pod with resourceClaims")])
    return subject


def validated_claims(subject: Subject, classes: Mapping[str, DeviceClassSpec], matcher: CelMatcher) -> list[ClaimSpec]:
    errors: list[FieldError] = []
    for claim in subject.claims:
        errors += claim_spec_errors(claim.spec, claim.label, classes, matcher.compile_problem)
    if errors:
        raise InputError(errors)
    return [to_claim(c.spec, c.name, c.namespace) for c in subject.claims]


# -- fleet ----------------------------------------------------------------------------------------


def load_fleet(args: argparse.Namespace) -> fleets.Fleet:
    chosen = [flag for flag, on in (("--fleet", bool(args.fleet)), ("--profile", bool(args.profile)), ("--kubeconfig", bool(args.kubeconfig))) if on]
    if len(chosen) != 1:
        raise InputError([FieldError("arguments", f"give exactly one of --fleet, --profile, --kubeconfig (got {', '.join(chosen) or 'none'})")])
    if args.profile:
        # Rendered by our own layout code, which keeps the API limits; checking
        # 10,000 generated devices again would cost seconds.
        return fleets.simulated(args.profile, args.nodes, args.partitioning)
    fleet = fleets.load_paths(args.fleet) if args.fleet else fleets.from_cluster(args.kubeconfig)
    fleets.check_slices(fleet.slices)
    return fleet


def fleet_nodes(pools: Sequence[Any], known: Sequence[Node]) -> list[Node]:
    labels = {n.name: n.labels for n in known}
    names = sorted(set(node_names(pools)) | set(labels))
    if not names:
        return [Node("")]
    return [Node(name, labels.get(name) or {"kubernetes.io/hostname": name}) for name in names]


def explain(args: argparse.Namespace) -> tuple[Explanation, dict[str, Any], list[str]]:
    matcher = CelMatcher()
    fleet = load_fleet(args)
    subject = read_subject(args.file, fleet.claims)
    extra = fleets.load_paths(args.classes) if args.classes else fleets.Fleet()
    if extra.slices or extra.claims:
        raise InputError([FieldError("--classes", "may only hold DeviceClass objects")])
    layers = [("shipped", shipped_class_documents()), ("fleet", fleet.classes), ("--classes", extra.classes), (args.file, subject.classes)]
    classes = merge_classes(layers, matcher)
    claims = validated_claims(subject, classes, matcher)
    pools = build_pools(fleet.slices)
    nodes = fleet_nodes(pools, fleet.nodes)
    allocated = fleets.allocated_devices(fleet.claims, skip=subject.own_claims)
    explanation = Allocator(pools, classes, matcher, allocated).explain(claims, nodes)
    summary = {
        "sources": fleet.sources,
        "nodes": len(nodes),
        "pools": len(pools),
        "devices": sum(len(p.devices) for p in pools),
        "allocatedElsewhere": len(allocated),
        "celEvaluations": matcher.evaluations,
    }
    return explanation, summary, subject.notes


def run(args: argparse.Namespace) -> int:
    try:
        explanation, summary, notes = explain(args)
    except InputError as exc:
        for error in exc.errors:  # one line a problem, so each can be read (and grepped) alone
            print(f"invalid input: {error}", file=sys.stderr)
        return EXIT_INVALID
    except ValidationError as exc:
        print(f"invalid input: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except DraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    if args.output == "json":
        out = to_json(explanation, summary)
        out["notes"] = notes
        print(json.dumps(out, indent=2))
    else:
        line = f"Fleet: {', '.join(summary['sources'])}: {summary['devices']} devices in {summary['pools']} pools on {summary['nodes']} nodes"
        if summary["allocatedElsewhere"]:
            line += f"; {summary['allocatedElsewhere']} devices allocated to other claims"
        text = to_text(explanation, line, verbose=args.explain_all)
        if notes:
            text = "\n".join(f"Note: {n}" for n in notes) + "\n" + text
        sys.stdout.write(text)
    return EXIT_ALLOCATABLE if explanation.allocatable else EXIT_NOT_ALLOCATABLE
