"""Structured allocation for one node at a time, recording why each device was or was not usable.

Semantics follow the Kubernetes 1.35 scheduler's allocator (k8s.io/dynamic-resource-allocation structured/, docs/sources.md):
requests in order, `firstAvailable` alternatives in order, devices in pool order
(pools by driver/name, slices by name); class selectors then request selectors,
stopping at the first false; a CEL runtime error on a device the search reaches
is an error for the whole claim, never "no match". ExactCount skips invalid and
incomplete pools; All refuses them. Devices held by other claims are in use
unless the request asks for admin access. Shared counters of partitionable
devices are checked against the pool's counter sets minus what allocated devices
already consume. NoSchedule/NoExecute taints exclude a device unless tolerated.
matchAttribute/distinctAttribute constraints hold across the chosen devices of
the requests they name. The search backtracks and returns the first solution in
this order, like the Go allocator.

The search walks each request's devices as combinations (every next device of a
request comes after the previous one): a request's device set is unordered, so
this finds the same first solution as the Go code while skipping permutations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from dra_driver.allocator.capacity import Amounts, ConsumableCapacity, format_amount, share_id
from dra_driver.allocator.gcpause import collector_paused
from dra_driver.allocator.pools import device_node_target, target_matches
from dra_driver.allocator.selectors import Matcher, SelectorRuntimeError
from dra_driver.allocator.types import (
    Allocated,
    ClaimSpec,
    DeviceClassSpec,
    DeviceID,
    Node,
    Pool,
    PoolDevice,
    SubRequest,
    Toleration,
)
from dra_driver.model.memory_hint import memory_near_miss

MAX_RESULTS_PER_CLAIM = 32
DEFAULT_STEP_LIMIT = 200_000


@dataclass(frozen=True)
class Rejection:
    """Why one device cannot serve one request on one node.

    `summary` is identical for every device rejected for the same reason (reports
    group by it); `detail` is what is specific to this device.
    """

    code: str  # pool | allocated | selector | cel-error | counters | taint | constraint
    summary: str
    detail: str = ""


@dataclass
class NodeMatches:
    matched: list[DeviceID] = field(default_factory=list)
    rejected: list[tuple[DeviceID, Rejection]] = field(default_factory=list)


@dataclass
class AlternativeReport:
    """One request (or one firstAvailable subrequest) of one claim, across the nodes."""

    claim: str
    request: str
    result_name: str
    class_name: str
    wants: str  # a count, or "all"
    nodes: dict[str, NodeMatches] = field(default_factory=dict)


@dataclass
class Choice:
    request: str  # result name: <request> or <request>/<subrequest>
    device: PoolDevice
    alternative: SubRequest
    consumed: Amounts | None = None  # what it takes of a shared device (consumable capacity)


@dataclass
class NodeOutcome:
    node: str
    allocated: bool = False
    error: str | None = None  # scheduler error: the claim cannot be allocated at all
    reasons: list[str] = field(default_factory=list)  # why not, when there is no error
    choices: dict[str, list[Choice]] = field(default_factory=dict)  # claim label -> devices
    allocations: dict[str, dict[str, Any]] = field(default_factory=dict)  # claim label -> status.allocation
    steps: int = 0


@dataclass
class Explanation:
    claims: list[ClaimSpec]
    alternatives: list[AlternativeReport]
    nodes: list[NodeOutcome]

    @property
    def error(self) -> str | None:
        return next((n.error for n in self.nodes if n.error), None)

    @property
    def chosen(self) -> NodeOutcome | None:
        if self.error:
            return None
        return next((n for n in self.nodes if n.allocated), None)

    @property
    def allocatable(self) -> bool:
        return self.chosen is not None


class _NodeError(Exception):
    """A scheduler error on this node (CEL runtime error, All on an incomplete pool, ...)."""


class _StepLimit(Exception):
    pass


@dataclass
class _Plan:
    """One alternative on one node: ExactCount candidates, the All-mode device list, the first CEL error."""

    candidates: list[_Entry]
    everything: list[_Entry]
    first_error: str | None
    candidate_errors: bool = False  # some candidate's selector errs: no pruning, the search must reach it


@dataclass
class _Entry:
    """One device as a candidate for one alternative on one node."""

    device: PoolDevice
    pool: Pool
    selectable: bool | str  # str: the CEL runtime error, with its selector
    blocked: Rejection | None  # static reason found after the selectors (taint, counters)


# -- static checks ------------------------------------------------------------------------------


def _quantity_text(value: Decimal) -> str:
    return format(value.normalize(), "f") if value == value.to_integral_value() else str(value)


def taint_tolerated(taint: Mapping[str, Any], tolerations: Sequence[Toleration]) -> bool:
    for toleration in tolerations:
        if toleration.effect and toleration.effect != taint.get("effect"):
            continue
        if toleration.key and toleration.key != taint.get("key"):
            continue
        if toleration.operator == "Exists":
            return True
        if toleration.operator == "Equal" and toleration.value == str(taint.get("value") or ""):
            return True
    return False


def blocking_taint(device: PoolDevice, tolerations: Sequence[Toleration]) -> Mapping[str, Any] | None:
    """The first NoSchedule/NoExecute taint not tolerated; other effects (None, unknown) are ignored."""
    for taint in device.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not taint_tolerated(taint, tolerations):
            return taint
    return None


def _taint_text(taint: Mapping[str, Any]) -> str:
    value = f"={taint.get('value')}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"


def available_counters(pools: Sequence[Pool], allocated: Mapping[DeviceID, Allocated]) -> dict[tuple[str, str], dict[str, dict[str, Decimal]]]:
    """Per pool: its counter sets minus what devices allocated to other claims consume."""
    available: dict[tuple[str, str], dict[str, dict[str, Decimal]]] = {}
    for pool in pools:
        if not pool.counter_sets:
            continue
        remaining = {name: dict(counters) for name, counters in pool.counter_sets.items()}
        for device in pool.devices:
            holder = allocated.get(device.id)
            if holder is None or holder.admin_access:
                continue
            for set_name, counters in device.consumes:
                for counter, amount in counters:
                    if counter in remaining.get(set_name, {}):
                        remaining[set_name][counter] -= amount
        available[(pool.driver, pool.name)] = remaining
    return available


class _Counters:
    """Counter availability during one node's search: the fleet-wide remainder minus this search's picks."""

    def __init__(self, available: Mapping[tuple[str, str], Mapping[str, Mapping[str, Decimal]]]) -> None:
        self.available = available
        self.used: dict[tuple[str, str], dict[tuple[str, str], Decimal]] = {}

    def shortfall(self, pool: Pool, device: PoolDevice) -> str | None:
        """Why `device` does not fit next to what is allocated and being allocated, or None."""
        remaining = self.available.get((pool.driver, pool.name), {})
        used = self.used.get((pool.driver, pool.name), {})
        for set_name, counters in device.consumes:
            for counter, amount in counters:
                left = remaining.get(set_name, {}).get(counter, Decimal(0)) - used.get((set_name, counter), Decimal(0))
                if amount > left:
                    return f"counter set {set_name}: {counter} needs {_quantity_text(amount)}, {_quantity_text(max(left, Decimal(0)))} left"
        return None

    def take(self, pool: Pool, device: PoolDevice, sign: int) -> None:
        used = self.used.setdefault((pool.driver, pool.name), {})
        for set_name, counters in device.consumes:
            for counter, amount in counters:
                used[(set_name, counter)] = used.get((set_name, counter), Decimal(0)) + sign * amount


# -- the allocator ---------------------------------------------------------------------------------


def _single_node(pool: Pool) -> str | None:
    """The node every device of the pool is on, when all its slices name the same node and no device has its own target."""
    names = {target.node_name for target in pool.slice_targets.values()}
    if len(names) != 1 or any(device.target is not None for device in pool.devices):
        return None
    return next(iter(names))


def _pool_problem(pool: Pool) -> str | None:
    if pool.invalid:
        return f"pool {pool.driver}/{pool.name} is invalid: {pool.invalid}"
    if pool.incomplete:
        return f"pool {pool.driver}/{pool.name} is incomplete: {len(pool.slices)} of {pool.slice_count} slices at generation {pool.generation}"
    return None


class Allocator:
    """Explains and allocates claims against one fleet. Build once, call `explain`."""

    def __init__(
        self,
        pools: Sequence[Pool],
        classes: Mapping[str, DeviceClassSpec],
        matcher: Matcher,
        allocated: Mapping[DeviceID, Allocated] | None = None,
        step_limit: int = DEFAULT_STEP_LIMIT,
        capacity: ConsumableCapacity | None = None,
    ) -> None:
        self.pools = list(pools)
        self.capacity = capacity or ConsumableCapacity()
        self.classes = classes
        self.matcher = matcher
        self.allocated = dict(allocated or {})
        self.step_limit = step_limit
        self._available = available_counters(self.pools, self.allocated)
        self._rejections: dict[tuple[str, int, str, str], Rejection] = {}
        self._by_node: dict[str, list[tuple[int, int, Pool, PoolDevice]]] = {}
        self._floating: list[tuple[int, int, Pool, PoolDevice]] = []
        for pool_index, pool in enumerate(self.pools):
            node = _single_node(pool)
            if node:  # the common case: a node-local pool without per-device targets, in bulk
                self._by_node.setdefault(node, []).extend(
                    (pool_index, device_index, pool, device) for device_index, device in enumerate(pool.devices)
                )
                continue
            for device_index, device in enumerate(pool.devices):
                target = device_node_target(pool, device)
                item = (pool_index, device_index, pool, device)
                if target.node_name:
                    self._by_node.setdefault(target.node_name, []).append(item)
                else:
                    self._floating.append(item)

    def node_devices(self, node: Node) -> list[tuple[Pool, PoolDevice]]:
        """The devices usable on `node`, in allocation order."""
        items = list(self._by_node.get(node.name, []))
        floating = [item for item in self._floating if target_matches(device_node_target(item[2], item[3]), node)]
        if floating:
            items = sorted(items + floating, key=lambda item: (item[0], item[1]))
        return [(pool, device) for _, _, pool, device in items]

    # selectors ------------------------------------------------------------------------------

    def _selectors(self, alternative: SubRequest) -> list[tuple[str, int, str]]:
        """(origin, index, expression): class selectors first, then the request's."""
        device_class = self.classes[alternative.class_name]
        out = [(f"class {device_class.name}", i, e) for i, e in enumerate(device_class.selectors)]
        out += [("request", i, e) for i, e in enumerate(alternative.selectors)]
        return out

    def _select(self, selectors: list[tuple[str, int, str]], device: PoolDevice) -> tuple[bool | str, Rejection | None]:
        for origin, index, expression in selectors:
            try:
                if self.matcher.evaluate(expression, device):
                    continue
            except SelectorRuntimeError as exc:
                message = f"{origin} selector #{index}: CEL runtime error: {exc}"
                return message, Rejection("cel-error", message)
            detail = self.matcher.describe_reads(expression, device)
            key = (origin, index, expression, detail)
            rejection = self._rejections.get(key)  # identical for every device that read the same values
            if rejection is None:
                hint = memory_near_miss(expression, device.capacity)
                summary = f"{origin} selector #{index} is false: {expression}" + (f"; note: {hint}" if hint else "")
                rejection = self._rejections[key] = Rejection("selector", summary, detail)
            return False, rejection
        return True, None

    # per node -------------------------------------------------------------------------------

    def _entries(
        self, claim: ClaimSpec, alternative: SubRequest, devices: list[tuple[Pool, PoolDevice]], counters: _Counters, report: NodeMatches
    ) -> _Plan:
        """Classify every device for `alternative` (and say why for each one that does not fit)."""
        selectors = self._selectors(alternative)
        plan = _Plan([], [], None)
        problems: dict[int, str | None] = {}  # per pool, not per device
        for pool, device in devices:
            if id(pool) not in problems:
                problems[id(pool)] = _pool_problem(pool)
            pool_problem = problems[id(pool)]
            holder = self.allocated.get(device.id) if self.allocated else None
            selectable, rejection = self._select(selectors, device)
            blocked: Rejection | None = None
            if selectable is True:
                taint = blocking_taint(device, alternative.tolerations) if device.taints else None
                if taint is not None:
                    blocked = Rejection("taint", f"tainted {_taint_text(taint)} and not tolerated")
                elif device.consumes and not alternative.admin_access:
                    short = counters.shortfall(pool, device)
                    if short:
                        blocked = Rejection("counters", "shared counters exhausted by allocated devices", short)
                if blocked is None and self.capacity.enabled:
                    short = self.capacity.shortfall(device, self.capacity.demand(alternative, device), None)
                    if short:
                        blocked = Rejection("capacity", "requested capacity does not fit", short)
            entry = _Entry(device, pool, selectable, blocked) if selectable is not False else None  # most devices: not needed
            if not pool_problem and entry is not None:
                if selectable is True:
                    plan.everything.append(entry)
                elif isinstance(selectable, str) and plan.first_error is None:
                    plan.first_error = selectable
            in_use = holder is not None and not alternative.admin_access and not self.capacity.shareable(device)
            # The search only walks devices that can still be picked; a device whose
            # selector errs stays in, so the search reaches it in the scheduler's order.
            viable = selectable is not False and (blocked is None or blocked.code not in ("taint", "capacity"))
            if not pool_problem and not in_use and viable and entry is not None:
                plan.candidates.append(entry)
                plan.candidate_errors = plan.candidate_errors or isinstance(selectable, str)
            # What the report says: the first reason in the order the scheduler checks.
            if pool_problem:
                reason: Rejection | None = Rejection("pool", pool_problem)
            elif in_use:
                reason = Rejection("allocated", "allocated to another claim", f"held by {holder.claim}" if holder else "")
            else:
                reason = rejection or blocked
            if reason is None:
                report.matched.append(device.id)
            else:
                report.rejected.append((device.id, reason))
        return plan

    def explain(self, claims: Sequence[ClaimSpec], nodes: Sequence[Node]) -> Explanation:
        reports: dict[tuple[int, int, int], AlternativeReport] = {}
        for ci, claim in enumerate(claims):
            for ri, request in enumerate(claim.requests):
                for ai, alternative in enumerate(request.alternatives):
                    wants = "all" if alternative.all_devices else str(alternative.count)
                    reports[(ci, ri, ai)] = AlternativeReport(
                        claim.label, request.name, request.result_name(alternative), alternative.class_name, wants
                    )
        with collector_paused():  # per-device entries and reports all survive the call: nothing to collect
            outcomes = [self._explain_node(claims, node, reports) for node in nodes]
        return Explanation(list(claims), list(reports.values()), outcomes)

    def _explain_node(self, claims: Sequence[ClaimSpec], node: Node, reports: dict[tuple[int, int, int], AlternativeReport]) -> NodeOutcome:
        devices = self.node_devices(node)
        counters = _Counters(self._available)
        plan: dict[tuple[int, int, int], _Plan] = {}
        for key, report in reports.items():
            ci, ri, ai = key
            matches = NodeMatches()
            report.nodes[node.label] = matches
            plan[key] = self._entries(claims[ci], claims[ci].requests[ri].alternatives[ai], devices, counters, matches)
        outcome = NodeOutcome(node.label)
        search = _Search(claims, plan, counters, self.allocated, self.step_limit, self.capacity)
        try:
            search.check_all_mode(devices)
            outcome.allocated = search.run()
        except _NodeError as exc:
            outcome.error = str(exc)
        except _StepLimit:
            outcome.reasons.append(
                f"search stopped after {self.step_limit} steps without a result (the scheduler would keep going until its filter timeout)"
            )
        outcome.steps = search.steps
        if outcome.allocated:
            for ci, claim in enumerate(claims):
                outcome.choices[claim.label] = list(search.results[ci])
                outcome.allocations[claim.label] = allocation_result(claim, search.results[ci], self.classes, self.pools)
        elif outcome.error is None and not outcome.reasons:
            outcome.reasons = _failure_reasons(claims, reports, node.label, search.conflicts)
        return outcome


class _Search:
    """Backtracking over requests, alternatives and devices of all claims on one node."""

    def __init__(
        self,
        claims: Sequence[ClaimSpec],
        plan: Mapping[tuple[int, int, int], _Plan],
        counters: _Counters,
        allocated: Mapping[DeviceID, Allocated],
        step_limit: int,
        capacity: ConsumableCapacity,
    ) -> None:
        self.claims = claims
        self.capacity = capacity
        self.taken: dict[DeviceID, Amounts] = {}  # shared-device capacity the choices so far consume
        self.plan = plan
        self.counters = counters
        self.allocated = allocated
        self.step_limit = step_limit
        self.steps = 0
        self.allocating: dict[DeviceID, set[int]] = {}
        self.results: list[list[Choice]] = [[] for _ in claims]
        # Per claim and constraint: values of the chosen devices, in order.
        self.constraint_values: list[list[list[Any]]] = [[[] for _ in c.constraints] for c in claims]
        self.conflicts: dict[str, str] = {}  # "<claim> <request> <device>" -> first dynamic rejection

    def check_all_mode(self, devices: list[tuple[Pool, PoolDevice]]) -> None:
        """All-mode requests are sized before the search; bad pools or CEL errors stop it (like the scheduler)."""
        node_pools = {id(pool): pool for pool, _ in devices}
        for (ci, ri, ai), plan in self.plan.items():
            alternative = self.claims[ci].requests[ri].alternatives[ai]
            if not alternative.all_devices:
                continue
            name = self.claims[ci].requests[ri].result_name(alternative)
            for pool in node_pools.values():
                if pool.incomplete:
                    raise _NodeError(
                        f"claim {self.claims[ci].label}, request {name}: asks for all devices, but resource pool {pool.driver}/{pool.name} is "
                        f"currently being updated ({len(pool.slices)} of {pool.slice_count} slices)"
                    )
                if pool.invalid:
                    raise _NodeError(
                        f"claim {self.claims[ci].label}, request {name}: asks for all devices, but resource pool {pool.driver}/{pool.name} is "
                        f"invalid: {pool.invalid}"
                    )
            if plan.first_error:
                raise _NodeError(f"claim {self.claims[ci].label}, request {name}: {plan.first_error}")

    def run(self) -> bool:
        return self._request(0, 0)

    def _tick(self) -> None:
        self.steps += 1
        if self.steps > self.step_limit:
            raise _StepLimit()

    def _request(self, ci: int, ri: int) -> bool:
        if ci == len(self.claims):
            return True
        claim = self.claims[ci]
        if ri == len(claim.requests):
            return self._request(ci + 1, 0)
        for ai in range(len(claim.requests[ri].alternatives)):
            if self._device(ci, ri, ai, 0, 0):
                return True
        return False

    def _device(self, ci: int, ri: int, ai: int, k: int, start: int) -> bool:
        self._tick()
        alternative = self.claims[ci].requests[ri].alternatives[ai]
        plan = self.plan[(ci, ri, ai)]
        candidates, everything = plan.candidates, plan.everything
        need = len(everything) if alternative.all_devices else alternative.count
        if alternative.all_devices and need == 0:
            return False
        if k >= need:
            return self._request(ci, ri + 1)
        if len(self.results[ci]) + need - k > MAX_RESULTS_PER_CLAIM:
            return False
        if alternative.all_devices:
            entry = everything[k]
            if not self._take(ci, ri, ai, entry, must=True):
                return False
            if self._device(ci, ri, ai, k + 1, 0):
                return True
            self._release(ci, entry)
            return False
        if not plan.candidate_errors and len(candidates) - start < need - k:
            return False  # not enough devices left: no solution below (the Go code finds that out slowly)
        for index in range(start, len(candidates)):
            entry = candidates[index]
            if not self._take(ci, ri, ai, entry, must=False):
                continue
            if self._device(ci, ri, ai, k + 1, index + 1):
                return True
            self._release(ci, entry)
        return False

    def _conflict(self, ci: int, request: str, device: PoolDevice, reason: str) -> None:
        self.conflicts.setdefault(f"{self.claims[ci].label}\0{request}\0{device.id}", reason)

    def _take(self, ci: int, ri: int, ai: int, entry: _Entry, must: bool) -> bool:
        claim = self.claims[ci]
        request = claim.requests[ri]
        alternative = request.alternatives[ai]
        device = entry.device
        holders = self.allocating.get(device.id, set())
        shared = self.capacity.shareable(device)
        if alternative.admin_access:
            if ci in holders:
                return False
        elif not shared and (holders or device.id in self.allocated):
            return False
        if isinstance(entry.selectable, str):
            raise _NodeError(f"claim {claim.label}, request {request.result_name(alternative)}: {entry.selectable}")
        if entry.selectable is False or (entry.blocked is not None and entry.blocked.code == "taint"):
            return False
        consumes = bool(device.consumes) and not alternative.admin_access
        if consumes:
            short = self.counters.shortfall(entry.pool, device)
            if short:
                self._conflict(ci, request.result_name(alternative), device, f"{short} with the devices chosen so far")
                return False
        demand = self.capacity.demand(alternative, device) if self.capacity.enabled else {}
        if demand:
            short = self.capacity.shortfall(device, demand, self.taken.get(device.id))
            if short:
                self._conflict(ci, request.result_name(alternative), device, f"{short} with the devices chosen so far")
                return False
        values = self._constraint_values(ci, request.name, alternative.name if request.prioritized else None, device)
        if isinstance(values, str):
            if must:
                raise _NodeError(
                    f"claim {claim.label}, request {request.result_name(alternative)}: cannot add device {device.id} because a claim constraint "
                    f"would not be satisfied ({values})"
                )
            self._conflict(ci, request.result_name(alternative), device, values)
            return False
        for index, value in values:
            self.constraint_values[ci][index].append(value)
        if consumes:
            self.counters.take(entry.pool, device, +1)
        self.allocating.setdefault(device.id, set()).add(ci)
        if shared:
            taken = self.taken.setdefault(device.id, {})
            for name, amount in demand.items():
                taken[name] = taken.get(name, Decimal(0)) + amount
        self.results[ci].append(Choice(request.result_name(alternative), device, alternative, demand if shared else None))
        return True

    def _release(self, ci: int, entry: _Entry) -> None:
        choice = self.results[ci].pop()
        request_name, _, sub = choice.request.partition("/")
        for index, constraint in enumerate(self.claims[ci].constraints):
            if constraint.applies_to(request_name, sub or None):
                self.constraint_values[ci][index].pop()
        if choice.device.consumes and not choice.alternative.admin_access:
            self.counters.take(entry.pool, entry.device, -1)
        if choice.consumed is not None:
            taken = self.taken[entry.device.id]
            for name, amount in choice.consumed.items():
                taken[name] -= amount
        self.allocating[entry.device.id].discard(ci)

    def _constraint_values(self, ci: int, request: str, sub: str | None, device: PoolDevice) -> list[tuple[int, Any]] | str:
        """The values this device adds to each applicable constraint, or why it violates one."""
        out: list[tuple[int, Any]] = []
        for index, constraint in enumerate(self.claims[ci].constraints):
            if not constraint.applies_to(request, sub):
                continue
            attribute = constraint.match_attribute or constraint.distinct_attribute or ""
            value = device.attributes.get(attribute)
            kind = "matchAttribute" if constraint.match_attribute else "distinctAttribute"
            if value is None:
                return f"constraint {kind} {attribute}: device does not have this attribute"
            chosen = self.constraint_values[ci][index]
            if constraint.match_attribute and chosen and chosen[0] != value:
                return f"constraint matchAttribute {attribute}: {value[1]!r} differs from {chosen[0][1]!r} of the devices chosen so far"
            if constraint.distinct_attribute and value in chosen:
                return f"constraint distinctAttribute {attribute}: {value[1]!r} is already used by a chosen device"
            out.append((index, value))
        return out


# -- results ----------------------------------------------------------------------------------


def _node_selector(choices: Sequence[Choice], pools_by_id: Mapping[tuple[str, str], Pool]) -> dict[str, Any] | None:
    """Where the allocation can be used: the node of a node-local device, else the merged selectors."""
    expressions: list[Any] = []
    fields: list[Any] = []
    for choice in choices:
        pool = pools_by_id[(choice.device.id.driver, choice.device.id.pool)]
        target = device_node_target(pool, choice.device)
        if target.node_name:
            return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [target.node_name]}]}]}
        if target.node_selector:
            given = (target.node_selector.get("nodeSelectorTerms") or [{}])[0]
            expressions += [r for r in given.get("matchExpressions") or [] if r not in expressions]
            fields += [r for r in given.get("matchFields") or [] if r not in fields]
    if not expressions and not fields:
        return None
    term: dict[str, Any] = {}
    if expressions:
        term["matchExpressions"] = expressions
    if fields:
        term["matchFields"] = fields
    return {"nodeSelectorTerms": [term]}


def allocation_result(
    claim: ClaimSpec, choices: Sequence[Choice], classes: Mapping[str, DeviceClassSpec], pools: Sequence[Pool] | None = None
) -> dict[str, Any]:
    """The ResourceClaim status.allocation the scheduler would write (3.4)."""
    results: list[dict[str, Any]] = []
    for choice in choices:
        entry: dict[str, Any] = {
            "request": choice.request,
            "driver": choice.device.id.driver,
            "pool": choice.device.id.pool,
            "device": choice.device.id.device,
        }
        if choice.alternative.admin_access:
            entry["adminAccess"] = True
        if choice.alternative.tolerations:
            entry["tolerations"] = [t.wire() for t in choice.alternative.tolerations]
        if choice.consumed is not None:
            entry["shareID"] = share_id(claim.label, choice.request, choice.device.id, len(results))
            entry["consumedCapacity"] = {
                name.split("/", 1)[1] if name.startswith(f"{choice.device.id.driver}/") else name: format_amount(amount)
                for name, amount in choice.consumed.items()
            }
        results.append(entry)
    config: list[dict[str, Any]] = []
    class_entries: dict[str, list[dict[str, Any]]] = {}
    chosen_names: list[str] = []
    for choice in choices:
        if choice.request in chosen_names:
            continue
        chosen_names.append(choice.request)
        name = choice.alternative.class_name
        if name in class_entries:
            for entry in class_entries[name]:
                entry["requests"].append(choice.request)
            continue
        class_entries[name] = [{"source": "FromClass", "requests": [choice.request], "opaque": dict(opaque)} for opaque in classes[name].configs]
        config += class_entries[name]
    for requests, opaque in claim.configs:
        parents = {n.partition("/")[0] for n in chosen_names}
        if not requests or any(r in chosen_names or r in parents for r in requests):
            entry = {"source": "FromClaim", "opaque": dict(opaque)}
            if requests:
                entry["requests"] = list(requests)
            config.append(entry)
    devices: dict[str, Any] = {"results": results}
    if config:
        devices["config"] = config
    out: dict[str, Any] = {"devices": devices}
    if pools is not None:
        selector = _node_selector(choices, {(p.driver, p.name): p for p in pools})
        if selector:
            out["nodeSelector"] = selector
    return out


def _failure_reasons(
    claims: Sequence[ClaimSpec], reports: Mapping[tuple[int, int, int], AlternativeReport], node: str, conflicts: Mapping[str, str]
) -> list[str]:
    """Why no allocation exists on this node, when no single request explains it by itself."""
    reasons: list[str] = []
    for ci, claim in enumerate(claims):
        for ri, request in enumerate(claim.requests):
            short: list[str] = []
            for ai, alternative in enumerate(request.alternatives):
                report = reports[(ci, ri, ai)]
                available = len(report.nodes[node].matched)
                if alternative.all_devices and available == 0:
                    short.append(f"{report.result_name} wants all matching devices and none matches")
                elif not alternative.all_devices and available < alternative.count:
                    short.append(f"{report.result_name} needs {alternative.count}, {available} usable")
            if len(short) == len(request.alternatives):
                reasons.append(f"claim {claim.label}: " + "; ".join(short))
    if not reasons:
        reasons.append(
            "every request has enough usable devices on its own, but no combination satisfies the constraints and shared counters together"
        )
        for key, why in sorted(conflicts.items())[:8]:
            claim_label, request_name, device = key.split("\0")
            reasons.append(f"  {request_name} {device}: {why}")
    return reasons
