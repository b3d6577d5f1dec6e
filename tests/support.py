"""What many tests share: waiting for a condition that another thread or process brings about, and a free local port."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Only a cap for a test that is failing anyway: a passing test returns as soon as its condition holds.
DEFAULT_TIMEOUT_S = 30.0


def eventually(
    predicate: Callable[[], T],
    what: str = "condition",
    timeout: float = DEFAULT_TIMEOUT_S,
    *,
    step: float = 0.02,
    tolerate_errors: bool = False,
    details: Callable[[], str] | None = None,
) -> T:
    """The first true result of `predicate()`; AssertionError naming `what` (and `details()`) when `timeout` passes first.

    `tolerate_errors`: an exception from the predicate counts as "not yet" (state read mid-change)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if result := predicate():
                return result
        except Exception:
            if not tolerate_errors:
                raise
        if time.monotonic() > deadline:
            extra = f"\n{details()}" if details is not None else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{extra}")
        time.sleep(step)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago (for a server the test starts next)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
