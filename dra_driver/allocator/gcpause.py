"""Pausing the cyclic garbage collector while a fleet is built."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Set while a one-shot command runs (one_shot_command): what a paused block built is then
# moved out of the collector's generations instead of being left for it to scan.
_freeze_survivors = False


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
        if _freeze_survivors:
            # Everything built while paused is still in the youngest generation: the first
            # collection after re-enabling would traverse all of it (about 0.5 s of CPU for a
            # 40,000-device fleet over a whole explain run, docs/performance.md).
            gc.freeze()
        if was_enabled:
            gc.enable()


@contextmanager
def one_shot_command() -> Iterator[None]:
    """For a command that loads a fleet, answers once and exits (explain, fleet, template):
    what it loads lives until the process ends, so the collector need never scan it again.
    Undone at the end (gc.unfreeze), so a test or caller running commands in process keeps
    an ordinary collector afterwards."""
    global _freeze_survivors
    previous, _freeze_survivors = _freeze_survivors, True
    try:
        yield
    finally:
        _freeze_survivors = previous
        if not previous:
            gc.unfreeze()
