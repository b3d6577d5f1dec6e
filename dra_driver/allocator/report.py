"""Explanation -> text for people (grouped, bounded) or JSON for tools (everything)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import yaml

from dra_driver.allocator.engine import AlternativeReport, Explanation, NodeMatches, NodeOutcome, Rejection
from dra_driver.allocator.types import DeviceID

EXAMPLES = 3  # example devices shown per reason
NODE_LINES = 5  # nodes listed per request in the concise view


def _rejection_json(device: DeviceID, rejection: Rejection) -> dict[str, Any]:
    out: dict[str, Any] = {"device": str(device), "code": rejection.code, "reason": rejection.summary}
    if rejection.detail:
        out["detail"] = rejection.detail
    return out


def _outcome_json(outcome: NodeOutcome) -> dict[str, Any]:
    out: dict[str, Any] = {"node": outcome.node, "allocatable": outcome.allocated, "searchSteps": outcome.steps}
    if outcome.error:
        out["error"] = outcome.error
    if outcome.reasons:
        out["reasons"] = outcome.reasons
    if outcome.allocations:
        out["allocations"] = outcome.allocations
    return out


def to_json(explanation: Explanation, fleet_summary: dict[str, Any]) -> dict[str, Any]:
    chosen = explanation.chosen
    return {
        "allocatable": explanation.allocatable,
        "error": explanation.error,
        "node": chosen.node if chosen else None,
        "allocations": chosen.allocations if chosen else {},
        "fleet": fleet_summary,
        "requests": [
            {
                "claim": report.claim,
                "request": report.result_name,
                "deviceClassName": report.class_name,
                "wants": report.wants,
                "nodes": {
                    node: {"matched": [str(d) for d in matches.matched], "rejected": [_rejection_json(d, r) for d, r in matches.rejected]}
                    for node, matches in report.nodes.items()
                },
            }
            for report in explanation.alternatives
        ],
        "nodes": [_outcome_json(outcome) for outcome in explanation.nodes],
    }


# -- text -----------------------------------------------------------------------------------------


def _short(device: DeviceID) -> str:
    return f"{device.pool}/{device.device}"


def _names(devices: Sequence[DeviceID], limit: int | None) -> str:
    shown = [_short(d) for d in (devices if limit is None else devices[:limit])]
    more = len(devices) - len(shown)
    return ", ".join(shown) + (f", ... (+{more})" if more > 0 else "")


def _grouped(rejected: Sequence[tuple[DeviceID, Rejection]], limit: int | None) -> list[str]:
    groups: dict[str, list[tuple[DeviceID, Rejection]]] = {}
    for device, rejection in rejected:
        groups.setdefault(rejection.summary, []).append((device, rejection))
    lines: list[str] = []
    for summary, members in sorted(groups.items(), key=lambda item: -len(item[1])):
        lines.append(f"{len(members)} x {summary}")
        for device, rejection in members if limit is None else members[:limit]:
            lines.append(f"    {_short(device)}" + (f" ({rejection.detail})" if rejection.detail else ""))
        if limit is not None and len(members) > limit:
            lines.append(f"    ... and {len(members) - limit} more")
    return lines


def _request_text(report: AlternativeReport, focus: str | None, verbose: bool) -> list[str]:
    lines = [f"Request {report.result_name} of claim {report.claim} (class {report.class_name}, wants {report.wants})"]
    nodes = list(report.nodes.items())
    total_matched = sum(len(m.matched) for _, m in nodes)
    usable_nodes = sum(1 for _, m in nodes if m.matched)
    lines.append(f"  {total_matched} matching devices on {usable_nodes} of {len(nodes)} nodes")
    limit = None if verbose else EXAMPLES
    if not verbose:
        everything = [item for _, m in nodes for item in m.rejected]
        if everything:
            lines.append("  not matching, all nodes:")
            lines += [f"    {line}" for line in _grouped(everything, limit)]
    shown: list[tuple[str, NodeMatches]] = nodes if verbose else nodes[:NODE_LINES]
    if focus and not verbose and all(node != focus for node, _ in shown):
        shown = shown + [(focus, report.nodes[focus])]
    for node, matches in shown:
        lines.append(f"  {node}: {len(matches.matched)} match" + (f": {_names(matches.matched, None if verbose else 8)}" if matches.matched else ""))
        if verbose:
            lines += [f"      {line}" for line in _grouped(matches.rejected, None)]
    if not verbose and len(nodes) > len(shown):
        lines.append(f"  ... {len(nodes) - len(shown)} more nodes (--verbose or -o json lists them)")
    return lines


def _outcome_lines(explanation: Explanation, verbose: bool) -> list[str]:
    lines: list[str] = []
    failed = [o for o in explanation.nodes if not o.allocated]
    reasons = Counter(tuple(o.reasons) for o in failed if not o.error)
    for outcome in explanation.nodes if verbose else []:
        state = "allocatable" if outcome.allocated else (f"ERROR {outcome.error}" if outcome.error else "not allocatable")
        lines.append(f"  {outcome.node}: {state}")
        lines += [f"      {r}" for r in outcome.reasons]
    if not verbose:
        ok = len(explanation.nodes) - len(failed)
        lines.append(f"  {ok} of {len(explanation.nodes)} nodes could take the claim")
        for reason, count in reasons.most_common(EXAMPLES):
            example = next(o.node for o in failed if tuple(o.reasons) == reason)
            lines.append(f"  {count} node{'s' if count > 1 else ''} (e.g. {example}):")
            lines += [f"      {r.strip()}" for r in reason]
    return lines


def node_summary(explanation: Explanation) -> list[str]:
    """How many nodes could take the claims and the commonest reasons of the others (the concise "Nodes:" block)."""
    return _outcome_lines(explanation, verbose=False)


def scheduler_summary(explanation: Explanation) -> str:
    """kube-scheduler's FailedScheduling summary: `0/2 nodes are available: 2 Insufficient nvidia.com/gpu.`"""
    counts = Counter(reason for outcome in explanation.nodes if not outcome.allocated for reason in outcome.reasons)
    parts = ", ".join(f"{count} {reason}" for reason, count in sorted(counts.items()))
    available = sum(1 for outcome in explanation.nodes if outcome.allocated)
    return f"{available}/{len(explanation.nodes)} nodes are available: {parts}."


def to_text(explanation: Explanation, fleet_line: str, verbose: bool = False) -> str:
    chosen = explanation.chosen
    lines = [fleet_line, ""]
    for report in explanation.alternatives:
        lines += _request_text(report, chosen.node if chosen else None, verbose)
        lines.append("")
    lines.append("Nodes:")
    lines += _outcome_lines(explanation, verbose)
    lines.append("")
    if explanation.error:
        erring = next(o.node for o in explanation.nodes if o.error)
        lines.append(f"NOT ALLOCATABLE: {explanation.error}")
        lines.append(
            f"  (on {erring}; the scheduler stops on a selector error instead of treating it as no match: fix the expression or guard it with "
            "has()/in)"
        )
    elif chosen is None and not explanation.claims:  # no devices asked: other filters (node affinity, extended resources) said no
        lines.append(f"NOT ALLOCATABLE: {scheduler_summary(explanation)}")
    elif chosen is None:
        lines.append("NOT ALLOCATABLE: no node has devices that satisfy every request")
    else:
        lines.append(f"ALLOCATABLE on {chosen.node} (first suitable node by name). status.allocation:")
        for claim, allocation in chosen.allocations.items():
            lines.append(f"# {claim}")
            lines.append(yaml.safe_dump({"allocation": allocation}, sort_keys=False).rstrip())
    return "\n".join(lines) + "\n"
