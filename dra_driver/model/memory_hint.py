"""The 80Gi surprise: a GPU sold as "80GB" reports less than 80Gi (H100 80GB: 81559Mi, 79.6Gi), so a request
for `80Gi` misses it by a hair. Where a memory request misses a device by a small margin, template and explain
say so and suggest a request that matches (80G, 79Gi)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal

from dra_driver.model import quantity

NEAR = Decimal("0.9")  # a device with at least 90% of the request is a near miss worth explaining
GI = Decimal(2**30)


def near_miss(requested: str, device_bytes: Decimal) -> str:
    """Why `device_bytes` misses the request `requested` (e.g. "80Gi") and what would match; "" when not a near miss."""
    try:
        wanted = quantity.parse(requested)
    except ValueError:
        return ""
    if device_bytes >= wanted or device_bytes < wanted * NEAR:
        return ""
    gib = device_bytes / GI
    matches = []
    number = re.match(r"^(\d+)Gi$", requested.strip())
    if number and Decimal(number.group(1)) * 10**9 <= device_bytes:
        matches.append(f"{number.group(1)}G")  # the marketing number in decimal gigabytes
    matches.append(f"{int(gib)}Gi")
    sold = f'"{number.group(1)}GB" ' if number else ""
    return (f"a GPU sold as {sold}reports {quantity.from_bytes(int(device_bytes))} = {gib:.1f}Gi, as part of its memory is reserved: "
            f"just under {requested}; ask for {' or '.join(matches)} to match it")  # fmt: skip


_QUANTITY_LITERAL = re.compile(r"""quantity\(\s*["']([^"']{1,40})["']\s*\)""")


def memory_near_miss(expression: str, capacity: Mapping[str, str]) -> str:
    """A near miss of a selector's memory quantity (`quantity("80Gi")`) by this device's memory capacity; "" if none."""
    requested = _QUANTITY_LITERAL.findall(expression)
    if not requested or "memory" not in expression:
        return ""
    for name, value in capacity.items():
        if name.rpartition("/")[2] != "memory":
            continue
        try:
            memory = quantity.parse(value)
        except ValueError:
            continue
        for wanted in requested:
            hint = near_miss(wanted, memory)
            if hint:
                return hint
    return ""
