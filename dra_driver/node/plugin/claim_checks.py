"""What the plugin checks in a claim before it acts on it, and how long a claim's error may be.

Nothing from the socket or the API server is trusted (docs/plugin.md, "Input
validation"):
- the kubelet's claim reference (namespace, name, UID) follows the Kubernetes
  name rules before the UID reaches a file name, a lock or a CDI name, in
  prepare and in unprepare alike;
- of the allocation, only results of this driver are acted on, and each must
  name one of this node's pools, a valid device and request, and a well-formed
  share ID; anything else fails that claim with the field and its value;
- one claim may not hold the same device twice unless the extra results use
  adminAccess or distinct consumable-capacity shares.

Error text is bounded (MAX_ERROR_BYTES per claim, less when a batch holds many
failing claims) so that a response always fits the kubelet's 4 MiB gRPC limit:
one hostile claim must never fail the whole call.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dra_driver.common.errors import DraError
from dra_driver.model.names import (
    dns_label_problem,
    dns_subdomain_problem,
    pool_name_problem,
    request_name_problem,
    share_id_problem,
    shown,
    uid_problem,
)
from dra_driver.backend.interface import ClaimRef

if TYPE_CHECKING:  # the claim models are built with the API client, after the sockets serve (dra_driver.node.daemon)
    from dra_driver.model.resource_v1 import DeviceRequestAllocationResult

MAX_ERROR_BYTES = 1024
# All error texts of one response together; well under the kubelet's 4 MiB receive limit.
ERROR_BUDGET_BYTES = 1024 * 1024
MIN_ERROR_BYTES = 64
_TRUNCATED = " ... [truncated, {size} bytes in all]"


class ClaimError(DraError):
    """A problem with one claim; its message becomes that claim's error string."""


def check_ref(ref: ClaimRef) -> None:
    """The kubelet's claim reference: namespace a DNS label, name a DNS subdomain, a UID."""
    problems = [
        f"claim {label} {problem}"
        for label, problem in (
            ("namespace", dns_label_problem(ref.namespace)),
            ("name", dns_subdomain_problem(ref.name)),
            ("uid", uid_problem(ref.uid)),
        )
        if problem is not None
    ]
    if problems:
        raise ClaimError("invalid claim reference from the kubelet: " + "; ".join(problems))


@dataclass(frozen=True)
class IndexedResult:
    """One of this driver's allocation results with its position in status.allocation.devices.results."""

    index: int
    result: DeviceRequestAllocationResult

    @property
    def field(self) -> str:
        return f"status.allocation.devices.results[{self.index}]"


def our_results(results: Sequence[DeviceRequestAllocationResult], driver: str) -> list[IndexedResult]:
    return [IndexedResult(i, r) for i, r in enumerate(results) if r.driver == driver]


def check_results(where: str, results: Sequence[IndexedResult], pools: Collection[str]) -> None:
    """Each result names this node's pool, a device, a request and (if any) a share ID that follow the rules."""
    problems: list[str] = []
    for item in results:
        problems.extend(_result_problems(item, pools))
    problems.extend(_duplicate_problems(results))
    if problems:
        raise ClaimError(f"{where}: " + "; ".join(problems))


def _result_problems(item: IndexedResult, pools: Collection[str]) -> Iterable[str]:
    r = item.result
    for name, problem in (
        ("request", request_name_problem(r.request)),
        ("pool", pool_name_problem(r.pool)),
        ("device", dns_label_problem(r.device)),
        ("shareID", share_id_problem(r.share_id) if r.share_id is not None else None),
    ):
        if problem is not None:
            yield f"{item.field}.{name} {problem}"
    if pool_name_problem(r.pool) is None and r.pool not in pools:
        yield (
            f"{item.field}.pool {shown(r.pool)} is not a pool of this node (this driver serves {', '.join(sorted(pools))}): "
            "the claim was allocated for another node; it cannot be prepared here"
        )


def _duplicate_problems(results: Sequence[IndexedResult]) -> Iterable[str]:
    """A device may appear twice in one claim only for adminAccess or for distinct shares."""
    groups: dict[tuple[str, str], list[IndexedResult]] = {}
    for item in results:
        if not item.result.admin_access:
            groups.setdefault((item.result.pool, item.result.device), []).append(item)
    for (pool, device), items in groups.items():
        if len(items) < 2:
            continue
        shares = [i.result.share_id for i in items]
        if all(shares) and len(set(shares)) == len(shares):
            continue
        fields_ = ", ".join(i.field for i in items)
        yield (
            f"device {shown(pool)}/{shown(device)} is allocated more than once ({fields_}) without adminAccess "
            "or distinct consumable-capacity shareIDs; a device can be given to a claim only once"
        )


def bounded(text: str, limit: int = MAX_ERROR_BYTES) -> str:
    """`text` cut to at most `limit` UTF-8 bytes, with a marker saying it was cut."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    marker = _TRUNCATED.format(size=len(data))
    keep = max(0, limit - len(marker.encode()))
    return data[:keep].decode("utf-8", "ignore") + marker


def error_limit(failing: int) -> int:
    """The per-claim error size when `failing` claims of one response carry an error."""
    if failing <= 0:
        return MAX_ERROR_BYTES
    return max(MIN_ERROR_BYTES, min(MAX_ERROR_BYTES, ERROR_BUDGET_BYTES // failing))
