"""Device health: the latest state per device, streamed to the kubelet (DRAResourceHealth).

The same stream is served as `v1alpha1.DRAResourceHealth` (kubelets 1.35-1.39) and
`v1.DRAResourceHealth` (1.37 on; a kubelet that finds both in `supported_versions` takes v1):
the two packages have the same messages and field numbers, so one servicer per package renders
the same states with that package's classes, and both take their streams from one set of slots.

The kubelet treats every stream message as the complete list for the driver
and marks a device Unknown when it has not been reported for its timeout, so
the stream repeats the full list every RESEND_INTERVAL_S even when nothing
changes, and each entry carries `health_check_timeout_seconds` =
HEALTH_TIMEOUT_S (three re-send intervals): if our reports stop (a hung
process, a wedged stream) the kubelet turns the devices Unknown on its own.

When the backend's health source dies (its watcher raises or ends before the
plugin stops), nothing observes the devices any more, so every device is
reported UNKNOWN from then on instead of its last state.

A stream holds a gRPC worker thread while it is open, and the DRA socket's
threads also serve NodePrepareResources/NodeUnprepareResources. So at most
MAX_STREAMS streams are open at once (the kubelet needs one per driver
instance; it reopens a broken one every 5 s); a stream beyond that is refused
at once with RESOURCE_EXHAUSTED, and the server gets that many threads on top
of the ones for claims. A stream whose client is gone ends at once: the RPC's
termination callback wakes it instead of leaving it asleep until the next
re-send.
"""

from __future__ import annotations

import enum
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import grpc

from dra_driver.api.drahealth.v1 import api_pb2 as health_v1_pb2
from dra_driver.api.drahealth.v1 import api_pb2_grpc as health_v1_grpc
from dra_driver.api.drahealth.v1alpha1 import api_pb2 as health_pb2
from dra_driver.api.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from dra_driver.common.logs import fields

log = logging.getLogger(__name__)

RESEND_INTERVAL_S = 10.0
MAX_STREAMS = 4
REFUSAL_LOG_INTERVAL_S = 60.0  # a client that keeps opening streams gets one warning a minute, not one per try
# Two re-sends may be lost or late before the kubelet stops trusting a report
# (its own default would be 30 s when the field is 0).
TIMEOUT_RESENDS = 3
MESSAGE_LIMIT = 1024  # DeviceHealth.message: the kubelet cuts longer text itself, ours is cut first and says so
# The health services served, in the order they are advertised (the kubelet prefers v1 when it knows it).
HEALTH_SERVICES: dict[str, tuple[ModuleType, Callable[[Any, grpc.Server], None]]] = {
    "v1.DRAResourceHealth": (health_v1_pb2, health_v1_grpc.add_DRAResourceHealthServicer_to_server),
    "v1alpha1.DRAResourceHealth": (health_pb2, health_grpc.add_DRAResourceHealthServicer_to_server),
}


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

    def wait_change(self, seen: int, timeout: float, ended: threading.Event | None = None) -> bool:
        """Block until the version moves past `seen`, the hub closes, `ended` is set (see wake), or the
        timeout; False when closed or ended."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != seen or self._closed or (ended is not None and ended.is_set()), timeout)
            return not (self._closed or (ended is not None and ended.is_set()))

    def wake(self) -> None:
        """Wake every waiter so that one whose stream ended can notice."""
        with self._changed:
            self._changed.notify_all()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _bump(self) -> None:
        self._version += 1
        self._changed.notify_all()


def _bounded_reason(reason: str) -> str:
    if len(reason) <= MESSAGE_LIMIT:
        return reason
    return reason[: MESSAGE_LIMIT - 3] + "..."


def _message(pb: ModuleType, pool: str, states: Sequence[DeviceHealthState], timeout_s: int) -> Any:
    """One full list in the classes of `pb` (v1 or v1alpha1: same fields); the enum numbers are equal too."""
    return pb.NodeWatchResourcesResponse(
        devices=[
            pb.DeviceHealth(
                device=pb.DeviceIdentifier(pool_name=pool, device_name=s.device),
                health=s.health.value,
                last_updated_time=s.updated,
                health_check_timeout_seconds=timeout_s,
                message=_bounded_reason(s.reason),
            )
            for s in states
        ]
    )


class StreamSlots:
    """A fixed number of open streams; a slot is given back once, whichever of its holders ends first."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the number of health streams must be at least 1, got {limit}")
        self.limit = limit
        self._free = limit
        self._lock = threading.Lock()

    def take(self) -> threading.Event | None:
        """A slot (an event that is set when it is given back), or None when all are taken."""
        with self._lock:
            if self._free == 0:
                return None
            self._free -= 1
        return threading.Event()

    def give_back(self, slot: threading.Event) -> None:
        with self._lock:
            if slot.is_set():
                return
            slot.set()
            self._free += 1

    @property
    def open(self) -> int:
        with self._lock:
            return self.limit - self._free


class HealthServicer:
    """NodeWatchResources of one health package (`pb`); `sibling` serves another package from the same slots."""

    def __init__(
        self,
        hub: HealthHub,
        resend_interval: float = RESEND_INTERVAL_S,
        max_streams: int = MAX_STREAMS,
        pb: ModuleType = health_pb2,
        slots: StreamSlots | None = None,
    ) -> None:
        self._hub = hub
        self._resend = resend_interval
        self._timeout_s = health_timeout_seconds(resend_interval)
        self.pb = pb
        # One thread budget for every package: the kubelet opens streams of one version only, but a
        # client asking both must not get twice the threads the DRA socket reserved for streams.
        self.slots = slots if slots is not None else StreamSlots(max_streams)
        self._refusals = 0
        self._refusal_logged = -REFUSAL_LOG_INTERVAL_S
        self._refusal_lock = threading.Lock()

    def sibling(self, pb: ModuleType) -> HealthServicer:
        """The same hub and slots served with another package's messages."""
        return HealthServicer(self._hub, self._resend, self.slots.limit, pb=pb, slots=self.slots)

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        slot = self.slots.take()
        if slot is None:
            self._log_refusal()
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"at most {self.slots.limit} health streams may be open at once")
            return

        def ended() -> None:  # the client went away or the call finished: free the slot and the thread
            self.slots.give_back(slot)
            self._hub.wake()

        context.add_callback(ended)
        try:
            yield from self._stream(context, slot)
        finally:
            self.slots.give_back(slot)

    def _log_refusal(self) -> None:
        with self._refusal_lock:  # streams arrive on several gRPC threads at once
            self._refusals += 1
            now = time.monotonic()
            if now - self._refusal_logged < REFUSAL_LOG_INTERVAL_S:
                return
            self._refusal_logged = now
        log.warning("health stream refused: too many open", extra=fields(pool=self._hub.pool, limit=self.slots.limit, refused=self._refusals))

    def _stream(self, context: grpc.ServicerContext, slot: threading.Event) -> Iterator[Any]:
        version, states = self._hub.snapshot()
        yield _message(self.pb, self._hub.pool, states, self._timeout_s)
        while context.is_active():
            # Wakes on a change, after the re-send interval or when the stream ended: a full list goes out unless it ended.
            if not self._hub.wait_change(version, self._resend, slot):
                return
            version, states = self._hub.snapshot()
            yield _message(self.pb, self._hub.pool, states, self._timeout_s)


def add_health_servicers(server: grpc.Server, servicer: HealthServicer) -> None:
    """Serve every package of HEALTH_SERVICES from `servicer`'s hub and slots."""
    for pb, add in HEALTH_SERVICES.values():
        add(servicer if pb is servicer.pb else servicer.sibling(pb), server)
