"""Kubernetes quantities: parsing with the kubernetes client's parser, canonical formatting."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from decimal import Decimal
from types import ModuleType


def _load_kubernetes_quantity_module() -> ModuleType:
    """The kubernetes client's quantity parser, without importing the whole client.

    `import kubernetes.utils.quantity` runs kubernetes/__init__.py, which loads the
    entire API client (~0.4 s); the parser module itself needs only `decimal`. We load
    that one file from the installed kubernetes package so that `discover`, `explain`
    and the CEL layer use the client's parser at a fraction of the start-up cost.
    """
    if "kubernetes.utils.quantity" in sys.modules:  # the client is loaded anyway: reuse it
        return sys.modules["kubernetes.utils.quantity"]
    spec = importlib.util.find_spec("kubernetes")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the kubernetes package is not installed")
    path = f"{list(spec.submodule_search_locations)[0]}/utils/quantity.py"
    module_spec = importlib.util.spec_from_file_location("dra_driver._kubernetes_quantity", path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot load the kubernetes quantity parser from {path}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


parse_quantity: Callable[[object], Decimal] = _load_kubernetes_quantity_module().parse_quantity

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
