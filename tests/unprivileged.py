"""Run a piece of a test as `nobody`: a forked child drops root and reports its result over a pipe."""

from __future__ import annotations

import json
import os
import select
import signal
from collections.abc import Callable
from typing import Any

NOBODY = 65534


def as_nobody(work: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    """`work()`'s JSON-able result, computed in a forked child running as nobody (uid and gid 65534, no groups).

    Forked rather than started: after setuid the child may not be able to read the project's files (a 0700 CI
    checkout), so it must find everything it needs already imported. A child that does not answer in time is
    killed and the test fails, rather than hang.
    """
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports over the pipe and never returns to pytest
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(writing, json.dumps(work()).encode())
        finally:
            os._exit(0)
    os.close(writing)
    with os.fdopen(reading, "rb") as pipe:
        ready, _, _ = select.select([pipe], [], [], timeout_s)
        answer = pipe.read() if ready else b""
    if not ready:
        os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    assert answer, f"the unprivileged child gave no answer within {timeout_s:.0f} s"
    return json.loads(answer)
