"""Exponential backoff with jitter and a cap, honouring a server's Retry-After."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Delays initial, initial*factor, ... up to cap, each stretched by up to `jitter` (fraction).

    The defaults follow the kubelet's wipe retries (1 s, x2, jitter 0.2, cap 5 min).
    """

    initial: float = 1.0
    factor: float = 2.0
    cap: float = 300.0
    jitter: float = 0.2
    failures: int = 0
    _random: random.Random = field(default_factory=random.Random, repr=False)

    def next_delay(self, retry_after: float | None = None) -> float:
        """Record a failure and return how long to wait before the next attempt."""
        base = min(self.cap, self.initial * (self.factor**self.failures))
        self.failures += 1
        delay = base * (1.0 + self.jitter * self._random.random())
        # The server knows best how long it needs: never retry before its Retry-After.
        return max(delay, retry_after) if retry_after is not None else delay

    def reset(self) -> None:
        self.failures = 0


def jittered(seconds: float, spread: float = 1.0, source: random.Random | None = None) -> float:
    """`seconds` stretched by a random fraction of up to `spread` (client-go's reflector draws its watch timeouts
    from [5 min, 10 min) this way), so the nodes of a rollout that started together do not renew in lockstep."""
    return seconds * (1.0 + spread * (source or random).random())
