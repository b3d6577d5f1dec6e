"""cProfile of every claim operation inside the daemon, for bench_prepare.py (not used in production).

Put this directory first on PYTHONPATH and name an output file; every Python process started that way
(the bench and the daemon it starts) runs each prepare and unprepare of one claim under its own cProfile
(each in its own thread), sums the stats under a lock and writes them to the file when it exits:

    PYTHONPATH=bench/call_profiler DRA_DRIVER_PROFILE_PREPARE=/tmp/prepare.prof \\
        python bench/bench_prepare.py --profile dgx-h100 --claims 300 --concurrency 1 --devices 1

Read them with `python -m pstats /tmp/prepare.prof`. Only one sitecustomize runs per process: use this
directory or bench/phase_timers, not both.
"""

from __future__ import annotations

import atexit
import cProfile
import functools
import os
import pstats
import threading
from typing import Any

OUT = os.environ.get("DRA_DRIVER_PROFILE_PREPARE", "")
# The per-claim steps of PrepareService that a batch runs, in a worker thread or the caller's.
CALLS = ("_prepare_guarded", "_unprepare_guarded")


class CallProfiler:
    """cProfile per call (each in its own thread), stats summed under a lock and dumped once."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._stats: pstats.Stats | None = None
        self._lock = threading.Lock()

    def wrap(self, owner: Any, name: str) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def profiled(*args: Any, **kwargs: Any) -> Any:
            profile = cProfile.Profile()
            try:
                return profile.runcall(original, *args, **kwargs)
            finally:
                with self._lock:
                    if self._stats is None:
                        self._stats = pstats.Stats(profile)
                    else:
                        self._stats.add(profile)

        setattr(owner, name, profiled)

    def dump(self) -> None:
        with self._lock:
            if self._stats is not None:
                self._stats.dump_stats(self._path)


def _install(path: str) -> None:
    from dra_driver.node.plugin.prepare import PrepareService

    profiler = CallProfiler(path)
    for name in CALLS:
        profiler.wrap(PrepareService, name)
    atexit.register(profiler.dump)


if OUT:
    _install(OUT)
