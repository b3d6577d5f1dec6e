"""explain's library: would kube-scheduler allocate these claims on this fleet, and if not, why.

`cli/explain.py` only parses arguments and prints; everything else is here so other
commands (demo, template, fleet) and benchmarks reuse it.

    explain(ExplainRequest(file, FleetSource(paths=[...]))) -> ExplainResult
"""

from __future__ import annotations

from dra_driver.explain.classes import merge_classes, shipped_class_documents
from dra_driver.explain.errors import InputError
from dra_driver.explain.fleet_source import FleetSource, fleet_nodes, load_fleet
from dra_driver.explain.gates import FeatureGates, parse_gates
from dra_driver.explain.run import ExplainRequest, ExplainResult, explain, explain_subject
from dra_driver.explain.subject import ClaimInput, Subject, read_subject, validated_claims

__all__ = [
    "ClaimInput",
    "ExplainRequest",
    "ExplainResult",
    "FeatureGates",
    "FleetSource",
    "InputError",
    "Subject",
    "explain",
    "explain_subject",
    "fleet_nodes",
    "load_fleet",
    "merge_classes",
    "parse_gates",
    "read_subject",
    "shipped_class_documents",
    "validated_claims",
]
