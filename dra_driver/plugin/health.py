"""Device health: the latest state per device, streamed to the kubelet (v1alpha1.DRAResourceHealth).

The kubelet treats every stream message as the complete list for the driver
and marks a device Unknown when it has not been reported for its timeout
(30 s by default), so the stream repeats the full list periodically even when
nothing changes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from dra_driver.api.drahealth.v1alpha1 import api_pb2 as health_pb2
from dra_driver.api.drahealth.v1alpha1 import api_pb2_grpc as health_grpc

RESEND_INTERVAL_S = 10.0  # well inside the kubelet's 30 s per-device timeout


@dataclass(frozen=True)
class DeviceHealthState:
    device: str
    healthy: bool
    reason: str
    updated: int  # Unix seconds


class HealthHub:
    """Current health of one pool's devices; wakes stream readers on change."""

    def __init__(self, pool: str, devices: Sequence[str]) -> None:
        self.pool = pool
        now = int(time.time())
        self._states = {name: DeviceHealthState(name, True, "", now) for name in devices}
        self._version = 0
        self._changed = threading.Condition()
        self._closed = False

    def update(self, device: str, healthy: bool, reason: str) -> bool:
        """Record a device's health; True when it changed."""
        with self._changed:
            old = self._states.get(device)
            if old is not None and old.healthy == healthy:
                return False
            self._states[device] = DeviceHealthState(device, healthy, reason, int(time.time()))
            self._version += 1
            self._changed.notify_all()
            return True

    def snapshot(self) -> tuple[int, list[DeviceHealthState]]:
        with self._changed:
            return self._version, sorted(self._states.values(), key=lambda s: s.device)

    def wait_change(self, seen: int, timeout: float) -> bool:
        """Block until the version moves past `seen`, the hub closes, or the timeout; False when closed."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != seen or self._closed, timeout)
            return not self._closed

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()


def _message(pool: str, states: Sequence[DeviceHealthState]) -> Any:
    return health_pb2.NodeWatchResourcesResponse(
        devices=[
            health_pb2.DeviceHealth(
                device=health_pb2.DeviceIdentifier(pool_name=pool, device_name=s.device),
                health=health_pb2.HEALTHY if s.healthy else health_pb2.UNHEALTHY,
                last_updated_time=s.updated,
            )
            for s in states
        ]
    )


class HealthServicer(health_grpc.DRAResourceHealthServicer):
    def __init__(self, hub: HealthHub, resend_interval: float = RESEND_INTERVAL_S) -> None:
        self._hub = hub
        self._resend = resend_interval

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        version, states = self._hub.snapshot()
        yield _message(self._hub.pool, states)
        while context.is_active():
            if not self._hub.wait_change(version, self._resend):
                return
            version, states = self._hub.snapshot()
            yield _message(self._hub.pool, states)
