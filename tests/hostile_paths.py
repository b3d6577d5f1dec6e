"""Hostile things at a path the node reads, and a guard that turns a hang into a failure.

A reader that blocks in `open()` on a named pipe would hang the test run; `returns_within` runs the reader in a
thread and, when it does not return in time, opens the pipe's write end (which lets the blocked `open()` go on)
and fails the test.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

HOSTILE = ("fifo", "dev-zero-symlink")
T = TypeVar("T")


def plant(path: Path, kind: str) -> None:
    """Put a named pipe nobody writes to, or a symlink to /dev/zero, at `path` (replacing what is there)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero-symlink":
        path.symlink_to("/dev/zero")
    else:
        raise ValueError(kind)


def returns_within(work: Callable[[], T], path: Path, timeout_s: float = 10.0) -> T:
    """`work()`'s result, or a test failure when it has not returned within `timeout_s` (blocked on `path`)."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = work()
        except BaseException as exc:  # re-raised in the test's thread
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        try:  # release a reader blocked in open() on a pipe, so the thread ends with the test
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        pytest.fail(f"still blocked after {timeout_s:g} s on {path}", pytrace=False)
    if "error" in result:
        raise result["error"]
    return result["value"]
