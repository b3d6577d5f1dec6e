"""Consumable capacity (DRAConsumableCapacity, alpha, off by default in 1.35).

With the gate on, a device that publishes `allowMultipleAllocations: true` can be allocated
to several requests and claims at once, as long as what they take of its capacities fits:
each result on such a device records a `shareID` and the `consumedCapacity` it took of every
capacity the device publishes. What a request takes of one capacity follows the scheduler
(k8s.io/dynamic-resource-allocation, `calculateConsumedCapacity` and `violatesPolicy`):

- no amount requested: the capacity's `requestPolicy.default`, else its whole value;
- an amount and no policy: the amount as asked;
- `validRange`: below `min` takes `min`; with `step`, rounded up to `min + n*step`; above `max`
  the device does not fit;
- `validValues`: rounded up to the smallest valid value not below it; above the largest the
  device does not fit.

A consumed amount equal to the policy's default is always allowed. On a device that is not
shared, requested amounts are only checked against its capacities (a policy needs
`allowMultipleAllocations`); an amount larger than the device's capacity rules it out.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from typing import Any

from dra_driver.allocator.types import DeviceID, PoolDevice, SubRequest
from dra_driver.model import quantity

Amounts = dict[str, Decimal]  # qualified capacity name -> amount


def _qualified(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def _parse(value: Any) -> Decimal | None:
    try:
        return quantity.parse(str(value))
    except (ValueError, ArithmeticError):
        return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def shared_consumption(claims: Iterable[Mapping[str, Any]], skip: Iterable[str] = ()) -> dict[DeviceID, Amounts]:
    """What other claims' results on shared devices (those with a shareID) consume."""
    skipped = set(skip)
    out: dict[DeviceID, Amounts] = {}
    for doc in claims:
        meta = _mapping(doc.get("metadata"))
        if f"{meta.get('namespace')}/{meta.get('name')}" in skipped:
            continue
        allocation = _mapping(_mapping(doc.get("status")).get("allocation"))
        results = _mapping(allocation.get("devices")).get("results")
        for result in results if isinstance(results, list) else []:
            if not isinstance(result, Mapping) or not result.get("shareID"):
                continue  # fleet files may hold malformed claims: they are skipped (and counted) elsewhere
            driver = str(result.get("driver"))
            device = DeviceID(driver, str(result.get("pool")), str(result.get("device")))
            taken = out.setdefault(device, {})
            for name, amount in _mapping(result.get("consumedCapacity")).items():
                parsed = _parse(amount)
                if parsed is not None:
                    key = _qualified(str(name), driver)
                    taken[key] = taken.get(key, Decimal(0)) + parsed
    return out


@dataclass(frozen=True)
class RequestPolicy:
    """One capacity's `requestPolicy`, parsed; `problem` says which field is not a quantity."""

    default: Decimal | None = None
    valid_values: tuple[Decimal, ...] = ()
    minimum: Decimal | None = None
    maximum: Decimal | None = None
    step: Decimal | None = None
    problem: str | None = None


def _policy(raw: Any) -> RequestPolicy | None:
    """The published policy (untrusted: the fleet may hold slices the API server never saw)."""
    if not isinstance(raw, Mapping):
        return None
    bad: list[str] = []

    def amount(value: Any, field_name: str) -> Decimal | None:
        if value is None:
            return None
        parsed = _parse(value)
        if parsed is None:
            bad.append(f"requestPolicy.{field_name} {value!r} is not a quantity")
        return parsed

    given_span, given_values = raw.get("validRange"), raw.get("validValues")
    span = given_span if isinstance(given_span, Mapping) else {}
    values = given_values if isinstance(given_values, list) else []
    parsed_values = [amount(v, f"validValues[{i}]") for i, v in enumerate(values)]
    step = amount(span.get("step"), "validRange.step")
    if step is not None and step <= 0:
        bad.append(f"requestPolicy.validRange.step {span.get('step')!r} must be positive")
    return RequestPolicy(
        default=amount(raw.get("default"), "default"),
        valid_values=tuple(sorted(v for v in parsed_values if v is not None)),
        minimum=amount(span.get("min"), "validRange.min"),
        maximum=amount(span.get("max"), "validRange.max"),
        step=step,
        problem="; ".join(bad) or None,
    )


def consumed_amount(requested: Decimal | None, value: Decimal, policy: RequestPolicy | None) -> Decimal:
    """What a request takes of one capacity of a shared device (the scheduler's rounding)."""
    if requested is None:
        return policy.default if policy is not None and policy.default is not None else value
    if policy is None:
        return requested
    if policy.minimum is not None:
        if requested < policy.minimum:
            return policy.minimum
        if policy.step is None:
            return requested
        steps = ((requested - policy.minimum) / policy.step).to_integral_value(rounding=ROUND_CEILING)
        return policy.minimum + steps * policy.step
    # The smallest valid value not below the request; above them all it stays as asked (and is refused).
    return next((valid for valid in policy.valid_values if requested <= valid), requested)


def policy_violation(amount: Decimal, policy: RequestPolicy | None) -> str | None:
    """Why the policy refuses a consumed amount, else None (the default is always allowed)."""
    if policy is None or amount == policy.default:
        return None
    if policy.minimum is not None:
        if policy.maximum is not None and amount > policy.maximum:
            return f"{format_amount(amount)} is above the request policy's maximum {format_amount(policy.maximum)}"
        if policy.step is not None and (amount - policy.minimum) % policy.step != 0:
            return f"{format_amount(amount)} is not {format_amount(policy.minimum)} plus a multiple of {format_amount(policy.step)}"
        return None
    if policy.valid_values and amount not in policy.valid_values:
        return f"{format_amount(amount)} is above the largest valid value {format_amount(policy.valid_values[-1])}"
    return None


@dataclass
class ConsumableCapacity:
    enabled: bool = False
    external: Mapping[DeviceID, Amounts] = field(default_factory=dict)  # shared_consumption()
    # Parsed once per device: demand() and shortfall() run for every try of the search.
    _policy_cache: dict[DeviceID, dict[str, RequestPolicy]] = field(default_factory=dict, repr=False)

    def shareable(self, device: PoolDevice) -> bool:
        return self.enabled and device.wire.get("allowMultipleAllocations") is True

    def demand(self, alternative: SubRequest, device: PoolDevice) -> Amounts:
        """What the request takes of the device's capacities: on a shared device every capacity,
        rounded by its request policy; elsewhere only the amounts asked for."""
        driver = device.id.driver
        requested = {_qualified(str(k), driver): _parse(v) for k, v in alternative.capacity_requests.items()}
        amounts = {k: v for k, v in requested.items() if v is not None}
        if not self.shareable(device):
            return amounts
        policies = self._policies(device)
        for name, value in device.capacity.items():
            offered = _parse(value)
            if offered is not None:
                amounts[name] = consumed_amount(amounts.get(name), offered, policies.get(name))
        return amounts  # a requested name the device lacks stays in, so shortfall() names it

    def shortfall(self, device: PoolDevice, demand: Amounts, taken: Mapping[str, Decimal] | None) -> str | None:
        """Why `demand` does not fit on the device (given what is taken already), else None."""
        shared = self.shareable(device)
        external = self.external.get(device.id, {}) if shared else {}
        policies = self._policies(device) if shared else {}
        for name, amount in demand.items():
            offered = _parse(device.capacity.get(name)) if name in device.capacity else None
            if offered is None:
                return f"capacity {name}: the device has none"
            policy = policies.get(name)
            refused = policy.problem if policy is not None and policy.problem else policy_violation(amount, policy)
            if refused:
                return f"capacity {name}: {refused}"
            used = external.get(name, Decimal(0)) + (taken or {}).get(name, Decimal(0))
            if used + amount > offered:
                left = offered - used
                return f"capacity {name}: needs {format_amount(amount)}, {format_amount(left)} of {format_amount(offered)} left"
        return None

    def _policies(self, device: PoolDevice) -> dict[str, RequestPolicy]:
        cached = self._policy_cache.get(device.id)
        if cached is None:
            driver = device.id.driver
            raw = device.wire.get("capacity") or {}
            cached = {
                _qualified(str(key), driver): policy
                for key, entry in raw.items()
                if isinstance(entry, Mapping) and (policy := _policy(entry.get("requestPolicy"))) is not None
            }
            self._policy_cache[device.id] = cached
        return cached


def format_amount(amount: Decimal) -> str:
    """A consumed amount as a quantity string (binary suffixes for whole numbers: 40Gi)."""
    if amount == amount.to_integral_value() and amount >= 0:
        return quantity.from_bytes(int(amount))
    return str(amount)


def share_id(claim: str, request: str, device: DeviceID, index: int) -> str:
    """A stable shareID for one result (Kubernetes generates a random UID; stable output is easier to read)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"dra-driver-explain/{claim}/{request}/{device}/{index}"))
