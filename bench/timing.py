"""The benchmarks' phase timer: median wall and CPU time of repeated runs.

CPU time (this process only) is the steadier figure on a shared machine and the better estimate of the
wall time on a quiet one, so both are printed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def timed(label: str, repeat: int, action: Callable[[], T]) -> tuple[T, float]:
    """Run `action` `repeat` times; print the medians; return the last result and the median CPU seconds."""
    walls: list[float] = []
    cpus: list[float] = []
    result: T | None = None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = action()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    print(f"{label:<46} {statistics.median(walls) * 1000:8.1f} ms wall {statistics.median(cpus) * 1000:8.1f} ms cpu")
    return result, statistics.median(cpus)  # type: ignore[return-value]
