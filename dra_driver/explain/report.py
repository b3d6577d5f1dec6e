"""explain's result for a file of several pods: one section per pod, then the workload's verdict.

A file of claims, or of one Pod, prints as the allocator's report (allocator/report.py) alone.
"""

from __future__ import annotations

from typing import Any

from dra_driver.allocator.report import to_json, to_text
from dra_driver.explain.run import ExplainResult


def pods_json(result: ExplainResult) -> list[dict[str, Any]]:
    """Every pod's own report, in placement order (the fleet summary is the caller's, once)."""
    out: list[dict[str, Any]] = []
    for pod in result.pods:
        report = to_json(pod.explanation, {})
        del report["fleet"]
        out.append({"pod": pod.pod, **report})
    return out


def pods_text(result: ExplainResult, fleet_line: str, verbose: bool) -> str:
    """A section per pod, then one line: were all pods placed."""
    sections = [fleet_line + "\n"]
    for pod in result.pods:
        sections.append(to_text(pod.explanation, f"== {pod.pod} ==", verbose=verbose))
    placed = [pod for pod in result.pods if pod.explanation.allocatable]
    total = len(result.pods)
    if len(placed) == total:
        nodes = sorted({chosen.node for pod in placed if (chosen := pod.explanation.chosen)})
        sections.append(f"ALLOCATABLE: all {total} pods placed, on {', '.join(nodes)}\n")
    else:
        failed = [pod.pod for pod in result.pods if not pod.explanation.allocatable]
        sections.append(f"NOT ALLOCATABLE: {len(placed)} of {total} pods placed; not placed: {'; '.join(failed)}\n")
    return "\n".join(sections)
