"""Health: GPU reset events and uncorrectable ECC taint every device of the GPU; post-reset clears."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from dra_driver.backend.interface import HealthEvent

from dra_driver_amd.backend import AmdBackend
from dra_driver_amd.health import TAINT_KEY


class _Watch:
    """Runs watch_health in a thread and hands its events over a queue."""

    def __init__(self, backend: AmdBackend) -> None:
        self.stop = threading.Event()
        self.events: queue.Queue[HealthEvent] = queue.Queue()
        iterator: Iterator[HealthEvent] = backend.watch_health(self.stop)
        self.thread = threading.Thread(target=lambda: [self.events.put(e) for e in iterator], daemon=True)
        self.thread.start()

    def take(self, count: int) -> list[HealthEvent]:
        return [self.events.get(timeout=5) for _ in range(count)]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        assert not self.thread.is_alive()

    def __enter__(self) -> _Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def test_reset_taints_the_gpu_and_post_reset_clears(open_backend):
    backend = open_backend("mi300x")
    backend.discover()
    with _Watch(backend) as watch:
        backend.library.inject_event("0000:26:00.0", "GPU_PRE_RESET", "ring gfx timeout")
        (event,) = watch.take(1)
        assert event.device == "gpu-8-136" and not event.healthy
        assert "ring gfx timeout" in event.reason
        assert event.taint is not None
        assert (event.taint.key, event.taint.effect, event.taint.value) == (TAINT_KEY, "NoSchedule", "GPUReset")
        backend.library.inject_event("0000:26:00.0", "GPU_POST_RESET")
        (event,) = watch.take(1)
        assert event.device == "gpu-8-136" and event.healthy and event.taint is None
    assert watch.events.empty()


def test_reset_of_a_partitioned_gpu_reports_every_partition(open_backend):
    backend = open_backend("mi300x-cpx")
    backend.discover()
    with _Watch(backend) as watch:
        backend.library.inject_event("0000:05:00.0", "GPU_PRE_RESET")
        events = watch.take(8)
        assert sorted(e.device for e in events) == sorted(f"gpu-{i}-{128 + i}" for i in range(8))
        assert all(not e.healthy for e in events)


def test_uncorrectable_ecc_taints_until_reset(open_backend):
    backend = open_backend("mi210")
    backend.discover()
    backend.library.inject_ecc("0000:43:00.0", uncorrectable=2)  # before watching: the baseline
    with _Watch(backend) as watch:
        backend.library.inject_ecc("0000:63:00.0", correctable=5)  # correctable errors are no reason
        backend.library.inject_ecc("0000:63:00.0", uncorrectable=1)
        (event,) = watch.take(1)
        assert event.device == "gpu-1-128" and not event.healthy
        assert event.taint is not None and event.taint.value == "UncorrectableECC"
        assert "1 new uncorrectable" in event.reason
        backend.library.inject_ecc("0000:63:00.0", uncorrectable=1)  # still unhealthy: no repeat
        backend.library.inject_event("0000:63:00.0", "GPU_POST_RESET")
        (event,) = watch.take(1)
        assert event.device == "gpu-1-128" and event.healthy
    assert watch.events.empty()


def test_other_events_are_ignored_and_stop_ends_the_watch(open_backend):
    backend = open_backend("mi210")
    backend.discover()
    watch = _Watch(backend)
    backend.library.inject_event("0000:63:00.0", "THERMAL_THROTTLE")
    backend.library.inject_event("0000:63:00.0", "GPU_POST_RESET")  # healthy already: nothing to report
    watch.close()
    assert watch.events.empty()


def test_stop_is_honoured_without_waiting_for_the_ecc_poll_interval(open_backend, monkeypatch):
    backend = open_backend("mi300x")
    backend.discover()
    backend.health_poll_s = 60.0  # ECC every minute: a read blocking that long would hold a daemon's stop
    waits: list[int] = []
    real_read = backend.library._read_events
    read_started = threading.Event()

    def recorded(wanted, timeout_ms, num_elem):
        waits.append(timeout_ms)
        read_started.set()
        return real_read(wanted, timeout_ms, num_elem)

    monkeypatch.setattr(backend.library, "_read_events", recorded)
    with _Watch(backend) as watch:
        assert read_started.wait(5)
    assert not watch.thread.is_alive()  # _Watch.close joined it within its 5 s
    assert waits and max(waits) <= 1000
