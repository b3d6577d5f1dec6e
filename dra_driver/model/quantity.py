"""Kubernetes quantities: parsing with the kubernetes client's parser, canonical formatting."""

from __future__ import annotations

from decimal import Decimal

from kubernetes.utils.quantity import parse_quantity

_BINARY_SUFFIXES: tuple[tuple[str, int], ...] = (
    ("Ei", 1 << 60),
    ("Pi", 1 << 50),
    ("Ti", 1 << 40),
    ("Gi", 1 << 30),
    ("Mi", 1 << 20),
    ("Ki", 1 << 10),
)


def parse(value: str | int) -> Decimal:
    """Parse a quantity string ("80Gi", "1.5", "500m"); raises ValueError when it is not one."""
    return Decimal(parse_quantity(value))


def is_quantity(value: object) -> bool:
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        return False
    try:
        parse(value)
    except (ValueError, TypeError, ArithmeticError):
        return False
    return True


def from_bytes(num_bytes: int) -> str:
    """Format a byte count with the largest binary suffix that divides it exactly: 85520809984 -> "81559Mi"."""
    if num_bytes < 0:
        raise ValueError(f"negative byte count {num_bytes}")
    for suffix, factor in _BINARY_SUFFIXES:
        if num_bytes and num_bytes % factor == 0:
            return f"{num_bytes // factor}{suffix}"
    return str(num_bytes)


def from_mebibytes(mib: int) -> str:
    return from_bytes(mib << 20)


def from_count(count: int) -> str:
    return str(int(count))
