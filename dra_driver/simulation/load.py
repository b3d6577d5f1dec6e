"""Plausible, changing readings for simulated devices (utilization, memory used, power, temperature).

The simulated vendor libraries (fake NVML, fake amdsmi, fake HLML) answer their metric calls from here,
so the node's device metrics show a living node without hardware. Each device drifts on its own
random walk, seeded from the device's key (UUID or bus ID), so a run is reproducible: the n-th
reading of a device is the same in every run. A device a claim holds (`set_busy`, fed by the
backend's `simulate_load`) drifts around a high utilization and memory use, an idle one near zero.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Collection
from dataclasses import dataclass

# Where each reading drifts towards: (busy, idle) targets as fractions of the device's maximum.
_UTILIZATION = (0.85, 0.02)
_MEMORY = (0.70, 0.005)
_POWER = (0.80, 0.12)  # of the board's power limit
_TEMPERATURE = (72.0, 34.0)  # degrees Celsius
_STEP = 0.25  # how far one reading moves towards its target (0..1): a few readings to settle
_NOISE = 0.04


@dataclass(frozen=True)
class Reading:
    utilization: float  # 0..1
    memory_fraction: float  # 0..1 of the device's memory
    power_fraction: float  # 0..1 of the power limit
    temperature_celsius: float


@dataclass
class _Walk:
    rng: random.Random
    reading: Reading


class SimulatedLoad:
    """One per simulated library; thread-safe (the collector and tests read while prepare marks devices busy)."""

    def __init__(self, seed: str = "") -> None:
        self._seed = seed
        self._lock = threading.Lock()
        self._busy: frozenset[str] = frozenset()
        self._walks: dict[str, _Walk] = {}

    def set_busy(self, keys: Collection[str]) -> None:
        """The devices (by key) that carry a workload now; every other one idles."""
        with self._lock:
            self._busy = frozenset(keys)

    def busy(self, key: str) -> bool:
        with self._lock:
            return key in self._busy

    def advance(self, key: str) -> Reading:
        """The device's next reading (call once per collection: the utilization call does)."""
        with self._lock:
            walk = self._walk(key)
            index = 0 if key in self._busy else 1
            old = walk.reading
            walk.reading = Reading(
                _towards(walk.rng, old.utilization, _UTILIZATION[index]),
                _towards(walk.rng, old.memory_fraction, _MEMORY[index]),
                _towards(walk.rng, old.power_fraction, _POWER[index]),
                round(old.temperature_celsius + (_TEMPERATURE[index] - old.temperature_celsius) * _STEP + walk.rng.uniform(-1.0, 1.0), 1),
            )
            return walk.reading

    def current(self, key: str) -> Reading:
        """The last reading, without moving (memory, power and temperature calls)."""
        with self._lock:
            return self._walk(key).reading

    def _walk(self, key: str) -> _Walk:
        walk = self._walks.get(key)
        if walk is None:
            digest = hashlib.sha256(f"{self._seed}/{key}".encode()).digest()
            rng = random.Random(int.from_bytes(digest[:8], "big"))
            start = Reading(_UTILIZATION[1], _MEMORY[1], _POWER[1], _TEMPERATURE[1] + rng.uniform(-3.0, 3.0))
            walk = self._walks[key] = _Walk(rng, start)
        return walk


def _towards(rng: random.Random, value: float, target: float) -> float:
    moved = value + (target - value) * _STEP + rng.uniform(-_NOISE, _NOISE)
    return min(1.0, max(0.0, moved))
