"""Device counts from resource quantities."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes.utils.quantity import parse_quantity


def device_count(value: Any) -> int | None:
    """The whole number of devices `value` asks for; None when it is not a whole number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        number = Decimal(parse_quantity(str(value)))
    except (ValueError, TypeError, InvalidOperation):
        return None
    if number != number.to_integral_value():
        return None
    return int(number)
