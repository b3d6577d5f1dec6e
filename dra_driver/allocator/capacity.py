"""Consumable capacity (DRAConsumableCapacity, alpha, off by default in 1.35).

With the gate on, a device that publishes `allowMultipleAllocations: true` can be allocated
to several requests and claims at once, as long as what they take of its capacities fits:
each result on such a device records a `shareID` and the `consumedCapacity` it took. A
request's `capacity.requests` names amounts of the device's capacities; on a shared device a
request that names none takes the whole of every capacity (what the device offers without a
request policy). On any device a requested amount larger than the device's capacity rules
the device out. Request policies (`capacity.requestPolicy`: defaults, steps, valid ranges)
are not modelled: the requested amount is what is consumed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
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


def shared_consumption(claims: Iterable[Mapping[str, Any]], skip: Iterable[str] = ()) -> dict[DeviceID, Amounts]:
    """What other claims' results on shared devices (those with a shareID) consume."""
    skipped = set(skip)
    out: dict[DeviceID, Amounts] = {}
    for doc in claims:
        meta = doc.get("metadata") or {}
        if f"{meta.get('namespace')}/{meta.get('name')}" in skipped:
            continue
        allocation = (doc.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            if not result.get("shareID"):
                continue
            driver = str(result.get("driver"))
            device = DeviceID(driver, str(result.get("pool")), str(result.get("device")))
            taken = out.setdefault(device, {})
            for name, amount in (result.get("consumedCapacity") or {}).items():
                parsed = _parse(amount)
                if parsed is not None:
                    key = _qualified(str(name), driver)
                    taken[key] = taken.get(key, Decimal(0)) + parsed
    return out


@dataclass
class ConsumableCapacity:
    enabled: bool = False
    external: Mapping[DeviceID, Amounts] = field(default_factory=dict)  # shared_consumption()

    def shareable(self, device: PoolDevice) -> bool:
        return self.enabled and device.wire.get("allowMultipleAllocations") is True

    def demand(self, alternative: SubRequest, device: PoolDevice) -> Amounts:
        """What the request takes of the device's capacities."""
        driver = device.id.driver
        requested = {_qualified(str(k), driver): _parse(v) for k, v in alternative.capacity_requests.items()}
        amounts = {k: v for k, v in requested.items() if v is not None}
        if amounts or not self.shareable(device):
            return amounts
        return {name: parsed for name, value in device.capacity.items() if (parsed := _parse(value)) is not None}

    def shortfall(self, device: PoolDevice, demand: Amounts, taken: Mapping[str, Decimal] | None) -> str | None:
        """Why `demand` does not fit on the device (given what is taken already), else None."""
        external = self.external.get(device.id, {}) if self.shareable(device) else {}
        for name, amount in demand.items():
            offered = _parse(device.capacity.get(name)) if name in device.capacity else None
            if offered is None:
                return f"capacity {name}: the device has none"
            used = external.get(name, Decimal(0)) + (taken or {}).get(name, Decimal(0))
            if used + amount > offered:
                left = offered - used
                return f"capacity {name}: needs {amount}, {left} of {offered} left"
        return None


def format_amount(amount: Decimal) -> str:
    """A consumed amount as a quantity string (binary suffixes for whole numbers: 40Gi)."""
    if amount == amount.to_integral_value() and amount >= 0:
        return quantity.from_bytes(int(amount))
    return str(amount)


def share_id(claim: str, request: str, device: DeviceID, index: int) -> str:
    """A stable shareID for one result (Kubernetes generates a random UID; stable output is easier to read)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"dra-driver-explain/{claim}/{request}/{device}/{index}"))
