"""The scheduler's part of `dra-driver demo`: allocate the example claim from the published slices.

The demo daemon publishes its ResourceSlices to the embedded API server like
on a cluster; this module reads them back through the kubernetes client and
allocates the claim with the same allocator, CEL and shipped DeviceClasses as
`dra-driver explain`, then writes `status.allocation` as kube-scheduler would.
"""

from __future__ import annotations

import time
from typing import Any

from dra_driver.allocator import Allocator, CelMatcher, Node, build_pools
from dra_driver.allocator.types import Pool
from dra_driver.model.api_group import API_VERSION
from dra_driver.model.resource_v1 import ResourceClaim
from dra_driver.sources.claims import parse_object
from dra_driver.explain import ClaimInput, Subject, validated_claims
from dra_driver.ingest.errors import InputError
from dra_driver.sources.classes import SHIPPED, ClassLayer, merge_classes, shipped_class_documents
from dra_driver.common.errors import DraError
from dra_driver.kube.client import JsonApi


def claim_object(name: str, namespace: str, device_class: str, count: int) -> dict[str, Any]:
    """The example claim a user would write: `count` devices of one DeviceClass."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}}]}
        },
    }


def wait_for_pool(api: JsonApi, driver: str, node: str, timeout_s: float = 15.0) -> list[dict[str, Any]]:
    """The node's slices for `driver` once the pool is complete (every slice of its newest generation is there)."""
    deadline = time.monotonic() + timeout_s
    while True:
        listed = api.request(
            "GET", "/apis/resource.k8s.io/v1/resourceslices", {"fieldSelector": f"spec.driver={driver},spec.nodeName={node}"}
        )
        slices: list[dict[str, Any]] = listed.get("items") or []
        pools = build_pools(slices)
        if pools and all(not p.incomplete and not p.invalid for p in pools):
            return slices
        if time.monotonic() > deadline:
            raise DraError(f"the daemon did not publish a complete {driver} pool for node {node} within {timeout_s:.0f} s")
        time.sleep(0.05)


def allocate(claim: dict[str, Any], slices: list[dict[str, Any]], node: str) -> tuple[dict[str, Any], list[str]]:
    """`status.allocation` for the claim on `node`, and the chosen device names; DraError says why not."""
    matcher = CelMatcher()
    classes = merge_classes([ClassLayer(SHIPPED, shipped_class_documents())], matcher)
    label = f"ResourceClaim {claim['metadata']['namespace']}/{claim['metadata']['name']}"
    parsed = parse_object(claim, label)
    if isinstance(parsed, list):
        raise InputError(parsed)
    assert isinstance(parsed, ResourceClaim)
    subject = Subject(claims=[ClaimInput(label, parsed.spec, claim["metadata"]["name"], claim["metadata"]["namespace"])])
    (spec,) = validated_claims(subject, classes, matcher)  # the checks explain applies
    pools: list[Pool] = build_pools(slices)
    explanation = Allocator(pools, classes, matcher).explain([spec], [Node(node, {"kubernetes.io/hostname": node})])
    chosen = explanation.chosen
    if chosen is None:
        outcome = explanation.nodes[0] if explanation.nodes else None
        why = explanation.error or ("; ".join(outcome.reasons) if outcome else "no node")
        raise DraError(f"the claim cannot be allocated on {node}: {why}")
    allocation = chosen.allocations[spec.label]
    return allocation, [r["device"] for r in allocation["devices"]["results"]]
