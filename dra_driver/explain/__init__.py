"""explain's library: would kube-scheduler allocate these claims on this fleet, and if not, why.

`cli/explain.py` only parses arguments and prints; everything else is here so other
commands (demo, template, the fleet exporter) and benchmarks reuse it. What it reads (the
fleet source, the shipped classes) comes from `dra_driver.sources`, as for every tool.

    explain(ExplainRequest(file, FleetSource(paths=[...]))) -> ExplainResult
"""

from __future__ import annotations

from dra_driver.explain.gates import FeatureGates, parse_gates
from dra_driver.explain.run import ExplainRequest, ExplainResult, explain, explain_subject
from dra_driver.explain.subject import ClaimInput, Subject, read_subject, validated_claims

__all__ = [
    "ClaimInput",
    "ExplainRequest",
    "ExplainResult",
    "FeatureGates",
    "Subject",
    "explain",
    "explain_subject",
    "parse_gates",
    "read_subject",
    "validated_claims",
]
