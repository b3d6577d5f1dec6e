"""Start failures leave nothing running; only one instance per (node, driver) publishes slices."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.node.conftest import make_settings
from tests.node.example_backend import DRIVER, ExampleBackend

from tests.support import eventually
from dra_driver.node.daemon import Daemon
from dra_driver.kube.claims import ClaimReader
from dra_driver.node.plugin.lease import LeasedPublisher
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.node.publisher.daemon_adapter import publisher_factory
from dra_driver.backend.interface import BackendSettings, HealthEvent


def driver_threads(before: set[threading.Thread]) -> list[str]:
    """Threads of this driver started since `before` (other tests may leave their own behind)."""
    return [t.name for t in threading.enumerate() if DRIVER in t.name and t not in before]


def test_driver_failing_to_register_never_publishes(short_tmp: Path, apiserver):
    """The registration socket cannot be created (a plain file is in the way): publishing starts only after it."""
    apiserver.add_node("node-a")
    settings = make_settings(short_tmp)
    paths = PluginPaths(settings.kubelet_dir.absolute(), DRIVER, state_dir=settings.state_dir)
    paths.registry_dir.mkdir(parents=True)
    paths.registration_socket.write_text("not a socket")
    api = apiserver.json_api()
    built: list[str] = []

    def factory(backend, inventory):
        built.append(backend.driver_name)
        return publisher_factory(api, "node-a")(backend, inventory)

    daemon = Daemon([ExampleBackend(BackendSettings(node_name="node-a"))], ClaimReader(api), settings, publisher_factory=factory)
    before = set(threading.enumerate())
    status = daemon.start()
    try:
        assert status.running == [] and "not a socket" in status.failed[DRIVER]
        assert built == [], "a publisher was built for a driver that never registered"
        assert apiserver.objects("ResourceSlice") == []
        assert not paths.dra_socket.exists()
        eventually(lambda: driver_threads(before) == [])
    finally:
        daemon.stop()


def test_publisher_failing_after_registration_stops_the_driver_and_withdraws(short_tmp: Path, apiserver):
    """Slices were written, then the publisher's start fails: the driver deregisters and takes its slices back."""
    apiserver.add_node("node-a")
    settings = make_settings(short_tmp)
    paths = PluginPaths(settings.kubelet_dir.absolute(), DRIVER, state_dir=settings.state_dir)
    api = apiserver.json_api()
    build = publisher_factory(api, "node-a")

    def factory(backend, inventory):
        assert paths.registration_socket.exists(), "publishing started before the driver registered"
        publisher = build(backend, inventory)
        real_start = publisher.publisher.start

        def start_then_fail() -> None:
            real_start()
            eventually(lambda: len(apiserver.objects("ResourceSlice")) > 0)
            raise RuntimeError("publisher broke after its first write")

        publisher.publisher.start = start_then_fail  # type: ignore[method-assign]
        return publisher

    daemon = Daemon([ExampleBackend(BackendSettings(node_name="node-a"))], ClaimReader(api), settings, publisher_factory=factory)
    before = set(threading.enumerate())
    status = daemon.start()
    try:
        assert status.running == [] and "publisher broke" in status.failed[DRIVER]
        assert apiserver.objects("ResourceSlice") == [], "a driver that is not registered still advertises devices"
        assert not paths.registration_socket.exists() and not paths.dra_socket.exists()
        eventually(lambda: driver_threads(before) == [])
        assert not paths.publisher_lease.exists() or _lease_free(paths.publisher_lease)
    finally:
        daemon.stop()


def _lease_free(path: Path) -> bool:
    probe = LeasedPublisher(_FakePublisher(), path, "probe")
    probe.start()
    free = probe.publishing.is_set()
    probe.stop()
    return free


class _FakePublisher:
    def __init__(self) -> None:
        self.started = 0
        self.stopped = 0
        self.health: list[HealthEvent] = []

    def start(self) -> None:
        self.started += 1

    def stop(self) -> None:
        self.stopped += 1

    def set_device_health(self, event: HealthEvent) -> None:
        self.health.append(event)


def test_only_the_lease_holder_publishes_and_the_other_takes_over(tmp_path: Path):
    lease = tmp_path / "publisher.lock"
    old_inner, new_inner = _FakePublisher(), _FakePublisher()
    old = LeasedPublisher(old_inner, lease, DRIVER, poll_interval=0.02)
    new = LeasedPublisher(new_inner, lease, DRIVER, poll_interval=0.02)
    old.start()
    new.start()
    try:
        assert old.publishing.is_set() and old_inner.started == 1
        time.sleep(0.1)  # several polls: the new instance must keep waiting
        assert not new.publishing.is_set() and new_inner.started == 0
        new.set_device_health(HealthEvent(device="gpu-0", healthy=False, reason="xid"))
        assert [e.device for e in new_inner.health] == ["gpu-0"]  # kept for when it publishes
        old.stop()
        assert old_inner.stopped == 1
        eventually(new.publishing.is_set)
        assert new_inner.started == 1
    finally:
        new.stop()
        old.stop()
    assert new_inner.stopped == 1


def test_second_daemon_publishes_once_the_first_stops(short_tmp: Path, apiserver):
    apiserver.add_node("node-a")
    api = apiserver.json_api()
    daemons = []
    for pod in ("pod-old", "pod-new"):
        settings = make_settings(short_tmp, pod_uid=pod)
        daemon = Daemon(
            [ExampleBackend(BackendSettings(node_name="node-a"))], ClaimReader(api), settings, publisher_factory=publisher_factory(api, "node-a")
        )
        assert daemon.start().running == [DRIVER]
        daemons.append(daemon)
    old, new = (d.plugins[DRIVER].publisher for d in daemons)
    try:
        assert old.publishing.is_set() and not new.publishing.is_set()
        eventually(lambda: len(apiserver.objects("ResourceSlice")) > 0)
        daemons[0].stop()
        eventually(new.publishing.is_set)
    finally:
        for daemon in daemons:
            daemon.stop()
