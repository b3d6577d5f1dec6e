"""`dra-driver explain`: would the scheduler allocate this claim on this fleet, and if not, why?

Exit codes: 0 allocatable (every pod placed), 1 not allocatable (including CEL runtime
errors), 2 invalid input (claim, class, fleet, arguments, and what the API server refuses
to create), with field paths.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from dra_driver.common.wording import plural
from dra_driver.allocator.report import to_json, to_text
from dra_driver.cli import failures
from dra_driver.cli.fleet_options import add_fleet_source, fleet_source
from dra_driver.common.errors import DraError
from dra_driver.explain import ExplainRequest, explain, parse_gates
from dra_driver.explain.admin_access import parse_namespace_labels
from dra_driver.explain.gates import DEFAULT_KUBERNETES_VERSION, GATES
from dra_driver.explain.kube_gates import KUBERNETES_VERSIONS
from dra_driver.explain.report import pods_json, pods_text

EXIT_ALLOCATABLE, EXIT_NOT_ALLOCATABLE, EXIT_INVALID = 0, 1, failures.EXIT_INVALID


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "explain",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "file",
        help="YAML/JSON with a ResourceClaim, ResourceClaimTemplate, Pods or workloads (Deployment, Job, PyTorchJob...: what migrate writes) "
            "with their templates (and optional DeviceClasses); - reads standard input",
    )
    add_fleet_source(
        parser,
        "fleet (one kind)",
        "ResourceSlices: kubectl List, multi-doc YAML, or a directory (repeatable)",
        "read slices, classes, claims and nodes from a cluster",
    )
    parser.add_argument(
        "--classes", action="append", default=[], metavar="DIR|FILE", help="extra DeviceClasses; they replace shipped classes of the same name"
    )
    parser.add_argument(
        "--feature-gates",
        metavar="NAME=BOOL,...",
        help="the cluster's Kubernetes feature gates (every gate the release knows is accepted, an unknown name is refused; the release's "
            "defaults otherwise); these change the answer: "
        + ", ".join(f"{n} (1.35 default {'on' if d else 'off'})" for n, (_, d) in sorted(GATES.items())),
    )
    parser.add_argument(
        "--kubernetes-version",
        choices=KUBERNETES_VERSIONS,
        help="the cluster's Kubernetes release: its gate defaults and its scheduler's device order (default: the cluster's own when one is "
            "read, else 1.35)",
    )
    parser.add_argument(
        "--namespace-labels",
        action="append",
        default=[],
        metavar="NS=KEY=VALUE[,KEY=VALUE]",
        help="labels of a namespace, as the API server sees them (admin access needs resource.kubernetes.io/admin-access=true); repeatable; "
            "they replace the file's and the cluster's",
    )
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text")
    parser.add_argument("--verbose", dest="explain_all", action="store_true", help="list every node and device in text output")
    parser.set_defaults(func=run)


def request_from_args(args: argparse.Namespace) -> ExplainRequest:
    gates = parse_gates(args.feature_gates, args.kubernetes_version or DEFAULT_KUBERNETES_VERSION)
    if gates.ignored:
        failures.info(f"note: {gates.ignored_note()}")
    return ExplainRequest(
        file=args.file,
        source=fleet_source(args),
        class_paths=tuple(args.classes),
        gates=gates,
        namespace_labels=parse_namespace_labels(args.namespace_labels),
        version_given=args.kubernetes_version is not None,
    )


def run(args: argparse.Namespace) -> int:
    try:
        result = explain(request_from_args(args))
    except DraError as exc:  # InputError and ValidationError included
        return failures.report(exc)
    explanation, summary, notes = result.explanation, result.summary, result.notes
    if args.output == "json":
        out = to_json(explanation, summary)
        if result.pods:  # the pods of the file, placed one after another
            out["allocatable"] = result.allocatable
            out["pods"] = pods_json(result)
        out["notes"] = notes
        out["warnings"] = result.warnings
        print(json.dumps(out, indent=2))
    else:
        counts = f"{plural(summary['devices'], 'device')} in {plural(summary['pools'], 'pool')} on {plural(summary['nodes'], 'node')}"
        line = f"Fleet: {', '.join(summary['sources'])}: {counts}"
        if summary["allocatedElsewhere"]:
            line += f"; {summary['allocatedElsewhere']} devices allocated to other claims"
        line += f"\nKubernetes {summary['kubernetesVersion']}: {summary['featureGates']}; device order: {summary['deviceOrder']}"
        line += f"\nCEL: selectors validated as {summary['celEnvironments']['validation']}, matched as {summary['celEnvironments']['matching']}"
        text = pods_text(result, line, args.explain_all) if len(result.pods) > 1 else to_text(explanation, line, verbose=args.explain_all)
        if notes:
            text = "\n".join(f"Note: {n}" for n in notes) + "\n" + text
        if result.warnings:
            text += "".join(f"Warning: {w}\n" for w in result.warnings)
        sys.stdout.write(text)
    return EXIT_ALLOCATABLE if result.allocatable else EXIT_NOT_ALLOCATABLE
