"""Device health: the latest state per device, streamed to the kubelet (v1alpha1.DRAResourceHealth).

The kubelet treats every stream message as the complete list for the driver
and marks a device Unknown when it has not been reported for its timeout, so
the stream repeats the full list every RESEND_INTERVAL_S even when nothing
changes, and each entry carries `health_check_timeout_seconds` =
HEALTH_TIMEOUT_S (three re-send intervals): if our reports stop (a hung
process, a wedged stream) the kubelet turns the devices Unknown on its own.

When the backend's health source dies (its watcher raises or ends before the
plugin stops), nothing observes the devices any more, so every device is
reported UNKNOWN from then on instead of its last state.
"""

from __future__ import annotations

import enum
import logging
import math
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import grpc

from dra_driver.api.drahealth.v1alpha1 import api_pb2 as health_pb2
from dra_driver.api.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from dra_driver.logs import fields

log = logging.getLogger(__name__)

RESEND_INTERVAL_S = 10.0
# Two re-sends may be lost or late before the kubelet stops trusting a report
# (its own default would be 30 s when the field is 0).
TIMEOUT_RESENDS = 3


class Health(enum.Enum):
    HEALTHY = health_pb2.HEALTHY
    UNHEALTHY = health_pb2.UNHEALTHY
    UNKNOWN = health_pb2.UNKNOWN


@dataclass(frozen=True)
class DeviceHealthState:
    device: str
    health: Health
    reason: str
    updated: int  # Unix seconds


def health_timeout_seconds(resend_interval: float) -> int:
    """The per-device timeout announced to the kubelet for a given re-send interval."""
    return max(1, math.ceil(resend_interval * TIMEOUT_RESENDS))


class HealthHub:
    """Current health of one pool's devices; wakes stream readers on change."""

    def __init__(self, pool: str, devices: Sequence[str]) -> None:
        self.pool = pool
        now = int(time.time())
        self._states = {name: DeviceHealthState(name, Health.HEALTHY, "", now) for name in devices}
        self._lost: DeviceHealthState | None = None  # set once the health source is gone
        self._version = 0
        self._changed = threading.Condition()
        self._closed = False

    def update(self, device: str, healthy: bool, reason: str) -> bool:
        """Record a device's health; True when it changed. Names outside the pool are ignored."""
        health = Health.HEALTHY if healthy else Health.UNHEALTHY
        with self._changed:
            old = self._states.get(device)
            if old is None:
                log.debug("health event for a device outside the pool ignored", extra=fields(pool=self.pool, device=device))
                return False
            if old.health == health:
                return False
            self._states[device] = DeviceHealthState(device, health, reason, int(time.time()))
            self._bump()
            return True

    def source_lost(self, reason: str) -> bool:
        """The health source stopped: report every device UNKNOWN from now on; True the first time."""
        with self._changed:
            if self._lost is not None:
                return False
            self._lost = DeviceHealthState("", Health.UNKNOWN, reason, int(time.time()))
            self._bump()
            return True

    def snapshot(self) -> tuple[int, list[DeviceHealthState]]:
        with self._changed:
            states = sorted(self._states.values(), key=lambda s: s.device)
            if self._lost is not None:
                lost = self._lost
                states = [replace(lost, device=s.device) for s in states]
            return self._version, states

    def wait_change(self, seen: int, timeout: float) -> bool:
        """Block until the version moves past `seen`, the hub closes, or the timeout; False when closed."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != seen or self._closed, timeout)
            return not self._closed

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _bump(self) -> None:
        self._version += 1
        self._changed.notify_all()


def _message(pool: str, states: Sequence[DeviceHealthState], timeout_s: int) -> Any:
    return health_pb2.NodeWatchResourcesResponse(
        devices=[
            health_pb2.DeviceHealth(
                device=health_pb2.DeviceIdentifier(pool_name=pool, device_name=s.device),
                health=s.health.value,
                last_updated_time=s.updated,
                health_check_timeout_seconds=timeout_s,
            )
            for s in states
        ]
    )


class HealthServicer(health_grpc.DRAResourceHealthServicer):
    def __init__(self, hub: HealthHub, resend_interval: float = RESEND_INTERVAL_S) -> None:
        self._hub = hub
        self._resend = resend_interval
        self._timeout_s = health_timeout_seconds(resend_interval)

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        version, states = self._hub.snapshot()
        yield _message(self._hub.pool, states, self._timeout_s)
        while context.is_active():
            # Wakes on a change or after the re-send interval: either way the full list goes out.
            if not self._hub.wait_change(version, self._resend):
                return
            version, states = self._hub.snapshot()
            yield _message(self._hub.pool, states, self._timeout_s)
