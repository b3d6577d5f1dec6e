"""XID and GPU-lost events from the simulated NVML become taints."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterator

import pytest

from dra_driver.backend.interface import AllocatedDevice, ClaimRef, HealthEvent
from dra_driver_nvidia.health import ignored_xids

from .conftest import OpenBackend


def _next(events: Iterator[HealthEvent], count: int = 1) -> list[HealthEvent]:
    """The next `count` events, failing (not hanging) when they do not come."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return [pool.submit(next, events).result(timeout=10) for _ in range(count)]


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def test_fatal_xid_taints_the_gpu(open_backend: OpenBackend, stop: threading.Event) -> None:
    backend = open_backend("dgx-h100")
    fake = backend.simulator
    assert fake is not None
    events = backend.watch_health(stop)
    fake.inject_xid(2, 13)  # application error: ignored
    fake.inject_xid(2, 79)
    (event,) = _next(events)
    assert (event.device, event.healthy) == ("gpu-2", False)
    assert "XID 79" in event.reason and "fallen off the bus" in event.reason
    assert event.taint is not None
    assert (event.taint.key, event.taint.value, event.taint.effect) == ("gpu.nvidia.com/xid", "79", "NoSchedule")
    stop.set()
    assert list(events) == []


def test_xid_on_a_mig_instance_taints_only_that_device(open_backend: OpenBackend, stop: threading.Event) -> None:
    backend = open_backend("dgx-a100-mig")
    fake = backend.simulator
    assert fake is not None
    gi_id = next(gi for uuid, gi, start in fake.live_instances() if uuid == fake.gpus[1].spec.uuid and start == 4)
    events = backend.watch_health(stop)
    fake.inject_xid(1, 94, gi_id=gi_id, ci_id=0)
    (event,) = _next(events)
    assert event.device == "gpu-1-mig-3g20gb-9-4"


def test_xid_without_instance_taints_every_device_of_the_gpu(open_backend: OpenBackend, stop: threading.Event) -> None:
    backend = open_backend("dgx-a100-mig")
    fake = backend.simulator
    assert fake is not None
    events = backend.watch_health(stop)
    fake.inject_xid(1, 48)
    devices = {e.device for e in _next(events, 2)}
    assert devices == {"gpu-1-mig-3g20gb-9-0", "gpu-1-mig-3g20gb-9-4"}


def test_xid_on_dynamic_instance_routes_to_the_prepared_device(open_backend: OpenBackend, stop: threading.Event) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic")
    fake = backend.simulator
    assert fake is not None
    state = backend.prepare(ClaimRef("ns", "c", "u"), [AllocatedDevice("gpu", "node-a", "gpu-4-mig-2g20gb-14-4")]).state
    gi_id = state["migInstances"][0]["giId"]
    events = backend.watch_health(stop)
    fake.inject_xid(4, 95, gi_id=gi_id, ci_id=0)
    (event,) = _next(events)
    assert event.device == "gpu-4-mig-2g20gb-14-4"


def test_gpu_lost_taints_every_device(open_backend: OpenBackend, stop: threading.Event) -> None:
    backend = open_backend("dgx-h100")
    fake = backend.simulator
    assert fake is not None
    events = backend.watch_health(stop)
    fake.inject_gpu_lost(6)
    lost = _next(events, 8)
    assert {e.device for e in lost} == {f"gpu-{i}" for i in range(8)}
    assert all(e.taint is not None and e.taint.key == "gpu.nvidia.com/gpu-lost" for e in lost)


def test_unregistrable_gpu_is_skipped_not_fatal(open_backend: OpenBackend, stop: threading.Event) -> None:
    backend = open_backend("dgx-h100")
    fake = backend.simulator
    assert fake is not None
    fake.fail("nvmlDeviceRegisterEvents", "NOT_SUPPORTED", gpu=0)
    events = backend.watch_health(stop)
    fake.inject_xid(0, 79)
    fake.inject_xid(1, 79)
    (event,) = _next(events)
    assert event.device == "gpu-1"


def test_additional_ignored_xids() -> None:
    assert ignored_xids({"ADDITIONAL_XIDS_TO_IGNORE": "79, 94,x"}) >= {13, 31, 43, 45, 68, 109, 79, 94}
    assert 79 not in ignored_xids({})
