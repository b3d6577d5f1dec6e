"""A pod's own node constraints, as kube-scheduler's NodeName and NodeAffinity filters apply them.

`spec.nodeName`, `spec.nodeSelector` (every label equal) and the required node affinity
(`requiredDuringSchedulingIgnoredDuringExecution`, terms ORed) all must hold. explain checks
them only where it knows the nodes' labels (Node objects from the cluster or the fleet files):
a simulated node carries only its hostname, and judging `instance-type: p5.48xlarge` against
that would reject every node for a reason the real fleet does not have.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_driver.allocator import Node
from dra_driver.allocator.pools import node_selector_matches

AFFINITY_REASON = "node(s) didn't match Pod's node affinity/selector"
NODE_NAME_REASON = "node(s) didn't match the requested node name"


@dataclass(frozen=True)
class NodeConstraints:
    node_name: str = ""
    selectors: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)  # core/v1 NodeSelectors, all must match

    def __bool__(self) -> bool:
        return bool(self.node_name or self.selectors)

    def reasons(self, node: Node) -> list[str]:
        """The scheduler's words for why `node` cannot take the pod; empty when it can."""
        if self.node_name and node.name != self.node_name:
            return [NODE_NAME_REASON]
        if any(not node_selector_matches(selector, node) for selector in self.selectors):
            return [AFFINITY_REASON]
        return []


def pod_constraints(pod: Mapping[str, Any]) -> NodeConstraints:
    spec = pod.get("spec") or {}
    selectors: list[Mapping[str, Any]] = []
    labels = spec.get("nodeSelector")
    if isinstance(labels, Mapping) and labels:
        requirements = [{"key": str(key), "operator": "In", "values": [str(value)]} for key, value in labels.items()]
        selectors.append({"nodeSelectorTerms": [{"matchExpressions": requirements}]})
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(affinity, Mapping) else None
    if isinstance(required, Mapping) and required.get("nodeSelectorTerms"):
        selectors.append(required)
    return NodeConstraints(str(spec.get("nodeName") or ""), tuple(selectors))
