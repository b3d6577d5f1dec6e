"""Offline structured allocation (the scheduler's DRA allocator) and the explanation it records."""

from __future__ import annotations

from dra_driver.allocator.engine import Allocator, AlternativeReport, Explanation, NodeOutcome, Rejection, allocation_result
from dra_driver.allocator.pools import build_pools, node_names
from dra_driver.allocator.selectors import CelMatcher, Matcher, SelectorRuntimeError
from dra_driver.allocator.types import Allocated, ClaimSpec, Constraint, DeviceClassSpec, DeviceID, Node, Request, SubRequest, Toleration

__all__ = [
    "Allocated",
    "Allocator",
    "AlternativeReport",
    "CelMatcher",
    "ClaimSpec",
    "Constraint",
    "DeviceClassSpec",
    "DeviceID",
    "Explanation",
    "Matcher",
    "Node",
    "NodeOutcome",
    "Rejection",
    "Request",
    "SelectorRuntimeError",
    "SubRequest",
    "Toleration",
    "allocation_result",
    "build_pools",
    "node_names",
]
