"""Health stream: UNKNOWN when the health source dies, per-device timeout, periodic full re-send."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.node.conftest import make_settings
from tests.node.example_backend import DRIVER, ExampleBackend

from dra_driver.api.drahealth.v1alpha1 import api_pb2 as health_pb2
from dra_driver.node.daemon import Daemon
from dra_driver.simulation import api_server as sim_apiserver
from dra_driver.kube.claims import ClaimReader
from dra_driver.node.plugin.health import RESEND_INTERVAL_S, HealthHub, HealthServicer, health_timeout_seconds
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import BackendSettings, HealthEvent


class ScriptedHealthBackend(ExampleBackend):
    """Yields one event once `go` is set, then fails (or ends) as the test asks."""

    def __init__(self, settings: BackendSettings, outcome: str) -> None:
        super().__init__(settings)
        self.outcome = outcome
        self.go = threading.Event()

    def watch_health(self, stop: threading.Event) -> Iterator[HealthEvent]:
        self.go.wait(10)
        yield HealthEvent(device="gpu-1", healthy=False, reason="XID 79")
        if self.outcome == "raise":
            raise RuntimeError("NVML event set broke")
        # "end": the generator returns although stop was never set


def _start(root: Path, server: sim_apiserver.SimApiServer, outcome: str) -> tuple[Daemon, ScriptedHealthBackend]:
    settings = make_settings(root)
    state = root / "state"
    state.mkdir()
    backend = ScriptedHealthBackend(BackendSettings(node_name="node-a", state_dir=state), outcome)
    daemon = Daemon([backend], ClaimReader(server.json_api()), settings)
    daemon.start()
    return daemon, backend


@pytest.mark.parametrize("outcome", ["raise", "end"])
def test_dead_health_source_turns_every_device_unknown_and_warns_once(short_tmp, apiserver, caplog, outcome):
    daemon, backend = _start(short_tmp, apiserver, outcome)
    try:
        conn = register(PluginPaths(make_settings(short_tmp).kubelet_dir, DRIVER).registration_socket)
        stream = conn.watch_health()
        first = next(stream)
        assert {d.health for d in first.devices} == {health_pb2.HEALTHY}
        with caplog.at_level(logging.WARNING, logger="dra_driver.node.plugin.driver"):
            backend.go.set()
            seen = [next(stream)]
            for _ in range(3):  # the UNHEALTHY event may or may not get its own message first
                if all(d.health == health_pb2.UNKNOWN for d in seen[-1].devices):
                    break
                seen.append(next(stream))
            daemon.plugins[DRIVER]._health_thread.join(5)
        last = seen[-1]
        assert len(last.devices) == 8
        assert {d.health for d in last.devices} == {health_pb2.UNKNOWN}
        lost = [r for r in caplog.records if "health source lost" in r.getMessage()]
        assert len(lost) == 1 and lost[0].levelno == logging.WARNING
        # Later events cannot bring a device back to a known state: the source is gone.
        daemon.plugins[DRIVER].on_health_event(HealthEvent(device="gpu-2", healthy=True, reason=""))
        assert {s.health.name for s in daemon.plugins[DRIVER].hub.snapshot()[1]} == {"UNKNOWN"}
        stream.cancel()
    finally:
        daemon.stop()


def test_stop_does_not_mark_devices_unknown(node):
    plugin = node.daemon.plugins[DRIVER]
    plugin._stop_health_feed()
    assert {s.health.name for s in plugin.hub.snapshot()[1]} == {"HEALTHY"}


def test_every_message_carries_timeout_tied_to_resend_interval(node):
    stream = node.connect().watch_health()
    first = next(stream)
    assert {d.health_check_timeout_seconds for d in first.devices} == {health_timeout_seconds(RESEND_INTERVAL_S)}
    # Two lost re-sends are tolerated, and the kubelet's own 30 s default is not undercut.
    assert health_timeout_seconds(RESEND_INTERVAL_S) >= 2 * RESEND_INTERVAL_S
    stream.cancel()


class _Context:
    def __init__(self, messages: int) -> None:
        self.left = messages

    def is_active(self) -> bool:
        self.left -= 1
        return self.left >= 0

    def add_callback(self, callback: object) -> bool:
        return True


def test_stream_resends_the_full_list_without_changes():
    hub = HealthHub("node-a", ["gpu-0", "gpu-1"])
    servicer = HealthServicer(hub, resend_interval=0.01)
    messages = list(servicer.NodeWatchResources(None, _Context(3)))
    assert len(messages) == 4  # the first plus three re-sends, with nothing changing
    for msg in messages:
        assert [d.device.device_name for d in msg.devices] == ["gpu-0", "gpu-1"]
        assert all(d.health_check_timeout_seconds == 1 for d in msg.devices)


def test_hub_ignores_devices_outside_the_pool():
    hub = HealthHub("node-a", ["gpu-0"])
    assert not hub.update("gpu-99", False, "XID 79")
    assert [s.device for s in hub.snapshot()[1]] == ["gpu-0"]


def test_source_lost_is_reported_once_and_wakes_readers():
    hub = HealthHub("node-a", ["gpu-0", "gpu-1"])
    hub.update("gpu-0", False, "XID 79")
    version, _ = hub.snapshot()
    assert hub.source_lost("boom")
    assert not hub.source_lost("again")
    assert hub.wait_change(version, 0)  # version moved: readers wake at once
    new_version, states = hub.snapshot()
    assert new_version != version
    assert [(s.device, s.health.name) for s in states] == [("gpu-0", "UNKNOWN"), ("gpu-1", "UNKNOWN")]
