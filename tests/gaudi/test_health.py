from __future__ import annotations

import threading

import pytest

from dra_driver.model.device import DeviceTaint
from dra_driver_gaudi.health import status_verdict

from .conftest import one_device

G2 = "0000-4d-00-0-0x1020"
G2_BDF = "0000:4d:00.0"
G3_BDF = "0000:43:00.0"
G3 = "0000-43-00-0-0x1060"


@pytest.fixture
def stop():
    event = threading.Event()
    yield event
    event.set()


def test_status_file_drives_health_and_recovery(open_profile, stop):
    backend = open_profile("gaudi2-hls")
    backend.fake.set_status(G2_BDF, "Needs reset")
    events = backend.watch_health(stop)
    first = next(events)
    assert (first.device, first.healthy) == (G2, False)
    assert first.taint == DeviceTaint(key="gaudi.intel.com/unhealthy", value="NeedsReset", effect="NoExecute")
    assert "Needs reset" in first.reason
    assert backend.discover().device(G2).attributes["healthy"] is False

    backend.fake.set_status(G2_BDF, "Operational")
    recovered = next(events)
    assert (recovered.device, recovered.healthy, recovered.taint) == (G2, True, None)
    assert backend.discover().device(G2).attributes["healthy"] is True


def test_only_changes_are_reported(open_profile, stop):
    backend = open_profile("gaudi2-hls")
    events = backend.watch_health(stop)
    backend.fake.set_status(G2_BDF, "Disabled")
    assert next(events).taint.value == "Disabled"
    backend.fake.set_status(G2_BDF, "In reset")  # another unhealthy state is a change too
    change = next(events)
    assert (change.healthy, change.taint.value) == (False, "InReset")
    backend.fake.set_status("0000:19:00.0", "Disabled")
    assert next(events).device == "0000-19-00-0-0x1020"  # the unchanged G2 is not repeated


def test_watch_ends_when_stopped(open_profile):
    stop = threading.Event()
    events = open_profile("gaudi2-intel-faker").watch_health(stop)
    stop.set()
    assert list(events) == []


def test_tree_without_status_files_counts_as_healthy(open_profile, stop):
    backend = open_profile({"devices": [one_device()]})
    (backend.settings.sysfs_root / "bus/pci/drivers/habanalabs/0000:19:00.0/status").unlink()
    [device] = backend.discover().devices
    assert device.attributes["healthy"] is True


def test_hlml_critical_error_until_reset(open_profile, stop):
    backend = open_profile("gaudi3-hls")
    events = backend.watch_health(stop)
    backend.fake_hlml.inject_critical_error(G3_BDF)
    event = next(events)
    assert (event.device, event.healthy) == (G3, False)
    assert event.taint == DeviceTaint(key="gaudi.intel.com/unhealthy", value="CriticalError", effect="NoExecute")
    assert backend.discover().device(G3).attributes["healthy"] is False

    backend.fake.count_hard_reset(G3_BDF)
    recovered = next(events)
    assert (recovered.device, recovered.healthy, recovered.taint) == (G3, True, None)


@pytest.mark.parametrize(
    ("status", "healthy", "value"),
    [
        (None, True, ""),
        ("Operational", True, ""),
        ("operational", True, ""),
        ("Disabled", False, "Disabled"),
        ("In reset after device release", False, "InResetAfterDeviceRelease"),
        ("in device creation", False, "InDeviceCreation"),
    ],
)
def test_status_verdicts(status, healthy, value):
    verdict = status_verdict(status)
    assert (verdict.healthy, verdict.taint_value) == (healthy, value)
