"""Watch or intercept calls of the simulated NVML library's C symbols (the lowest layer, as a driver would see them).

pynvml looks a symbol up on the library object once and caches the function; the cache is replaced
by an empty one after every change so the wrapper is what pynvml calls from then on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pynvml
import pytest

from dra_driver_nvidia.simulated.fake_nvml import FakeNvmlLibrary

# hook(original, *args) -> nvmlReturn_t; the hook decides whether and when the original runs
Hook = Callable[..., int]


def intercept(monkeypatch: pytest.MonkeyPatch, fake: FakeNvmlLibrary, symbol: str, hook: Hook) -> None:
    original = getattr(fake, symbol)

    def wrapper(*args: Any) -> int:
        return hook(original, *args)

    monkeypatch.setattr(fake, symbol, wrapper)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})


def count(monkeypatch: pytest.MonkeyPatch, fake: FakeNvmlLibrary, *symbols: str) -> Counter[str]:
    """A Counter of calls per symbol, updated as they happen."""
    calls: Counter[str] = Counter()
    for symbol in symbols:

        def counted(original: Callable[..., int], *args: Any, _symbol: str = symbol) -> int:
            calls[_symbol] += 1
            return original(*args)

        intercept(monkeypatch, fake, symbol, counted)
    return calls
