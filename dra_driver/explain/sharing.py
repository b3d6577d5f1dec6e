"""What explain says about claims that ask for a share of a device (`capacity.requests`, DRAConsumableCapacity).

A request with `capacity.requests` is a share only where two things hold: the cluster runs the
DRAConsumableCapacity gate (off by default in 1.35: the API server then drops `capacity` from the
claim, which asks for a whole device), and the device is published with `allowMultipleAllocations`
(NVIDIA nodes running `dra-driver run --consumable-gpu-memory`). Without either the allocation is
a whole, exclusive device, and explain says so rather than let "allocatable" read as "shared".
"""

from __future__ import annotations

from collections.abc import Sequence

from dra_driver.allocator import ClaimSpec
from dra_driver.allocator.types import Pool
from dra_driver.explain.gates import FeatureGates


def _share_requests(claims: Sequence[ClaimSpec]) -> list[str]:
    """`claim request` of every request (or subrequest) that asks for capacity."""
    out: list[str] = []
    for claim in claims:
        for request in claim.requests:
            for alternative in request.alternatives:
                if alternative.capacity_requests:
                    out.append(f"{claim.label} request {request.result_name(alternative)}")
    return out


def sharing_notes(claims: Sequence[ClaimSpec], pools: Sequence[Pool], gates: FeatureGates) -> list[str]:
    """One note when a claim asks for a share that this fleet and these gates cannot give."""
    asking = _share_requests(claims)
    if not asking:
        return []
    who = ", ".join(asking[:3]) + (f" and {len(asking) - 3} more" if len(asking) > 3 else "")
    if not gates.consumable_capacity:
        return [
            f"{who} asks for a share of a device (capacity.requests), but DRAConsumableCapacity is off (the 1.35 default): "
            "the API server drops capacity from the claim, which then holds a whole device alone; "
            "give --feature-gates DRAConsumableCapacity=true for a cluster that enables it"
        ]
    shareable = any(device.wire.get("allowMultipleAllocations") is True for pool in pools for device in pool.devices)
    if not shareable:
        return [
            f"{who} asks for a share of a device (capacity.requests), but no device of this fleet allows multiple allocations: "
            "each such claim holds a whole device alone; NVIDIA nodes share GPU memory when run with --consumable-gpu-memory "
            "(simulate them with --profile NAME --consumable-gpu-memory)"
        ]
    return []
