"""Warn where kube-scheduler's device search on a node is likely to run into its filter timeout.

explain answers an unsatisfiable request at once (it prunes with counts and counters), but
the scheduler's allocator backtracks through the combinations of candidate devices before
it gives up, and stops at its filter timeout (10 s by default, DRASchedulerFilterTimeout).
Measured against the real scheduler: 17 x 3g.40gb on a dynamic-MIG node (208 partitionable
devices, 16 of them 3g.40gb placements) takes the whole timeout. The estimate is the number
of device subsets the search can visit for each request, multiplied across requests;
partitionable devices (shared counters) are checked late in the search, so they warn at a
lower threshold than plain devices.
"""

from __future__ import annotations

from collections.abc import Iterable
from math import comb

from dra_driver.allocator import DeviceID, Explanation
from dra_driver.allocator.types import Pool

SHARED_COUNTER_LIMIT = 1 << 14  # subsets; 2^16 (the 17 x 3g.40gb case) is known to time out
PLAIN_LIMIT = 10**6
DYNAMIC_REJECTIONS = frozenset({"counters", "allocated"})  # decided during the search, not before


def subsets(candidates: int, count: int) -> int:
    """How many device subsets of size up to `count` the search can try among `candidates`."""
    return sum(comb(candidates, j) for j in range(min(count, candidates) + 1))


def timeout_warnings(explanation: Explanation, pools: Iterable[Pool]) -> list[str]:
    """One warning per node where the claims did not fit and the scheduler's search is large."""
    partitionable: set[DeviceID] = {device.id for pool in pools for device in pool.devices if device.consumes}
    warnings: list[str] = []
    for outcome in explanation.nodes:
        if outcome.allocated or outcome.error:
            continue
        space, shared, parts = 1, False, []
        for report in explanation.alternatives:
            matches = report.nodes.get(outcome.node)
            if matches is None or not report.wants.isdigit():
                continue
            candidates = list(matches.matched) + [d for d, why in matches.rejected if why.code in DYNAMIC_REJECTIONS]
            count = int(report.wants)
            space *= subsets(len(candidates), count)
            shared = shared or any(d in partitionable for d in candidates)
            parts.append(f"{report.claim} {report.result_name}: {count} of {len(candidates)} candidates")
        limit = SHARED_COUNTER_LIMIT if shared else PLAIN_LIMIT
        if space >= limit:
            warnings.append(_message(outcome.node, space, shared, parts))
    return warnings


def _message(node: str, space: int, shared: bool, parts: list[str]) -> str:
    kind = "partitionable devices that share counters" if shared else "devices"
    return (
        f"{node}: kube-scheduler's search ({'; '.join(parts)}) can visit about {space:,} combinations of {kind} "
        "before it gives up, so it will likely spend its whole filter timeout (10 s by default) on this node. "
        "Ask for fewer devices, narrow the selectors (for example a matchAttribute constraint on the parent GPU), "
        "or publish static partitions instead of dynamic ones."
    )


