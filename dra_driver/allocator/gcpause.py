"""Pausing the cyclic garbage collector while a fleet is built."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Parsing, checking and grouping a fleet creates millions of containers that all survive
    (no cycles among them); without this the cyclic collector rescans the growing heap again
    and again for nothing. Restores the previous state, also when the body raises."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
