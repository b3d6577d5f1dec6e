"""What the publisher costs the API server: no LIST while its watch is healthy, none for its own writes, jittered
watch renewals, and every request named by the driver's User-Agent."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from dra_driver.kube.client import USER_AGENT, make_json_api
from dra_driver.simulation.api_server import SimApiServer
from dra_driver.node.publisher import PublisherOptions, SlicePublisher
from tests.node.publisher.conftest import NODE, Source, eventually, pool_consistent, slices

Build = Callable[..., SlicePublisher]
LIST = ("list", "resourceslices")


def names(count: int) -> set[str]:
    return {f"gpu-{i}" for i in range(count)}


def test_own_writes_seen_by_the_watch_before_their_response_never_lead_to_a_list(
    server: SimApiServer, make_publisher: Build, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kubelet-style wipe costs exactly one LIST: the repair's own creates reach the watch before the publisher
    has read their responses (held back here), and are recognised as its own once it has."""
    publisher = make_publisher(Source(200)).start()  # 4 slices
    eventually(lambda: pool_consistent(slices(server), names(200)) and server.open_watches == 1, what="first publish")
    remember = SlicePublisher._remember

    def late(self: SlicePublisher, stored: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.1)  # the write's response is read after the watch has delivered its event
        return remember(self, stored)

    monkeypatch.setattr(SlicePublisher, "_remember", late)
    lists = server.requests[LIST]
    server.delete_collection_as_other("ResourceSlice", spec__nodeName=NODE)
    eventually(lambda: pool_consistent(slices(server), names(200)), what="repair after the wipe")
    time.sleep(0.5)  # room for a re-list, if the own creates were taken for someone else's
    assert server.requests[LIST] - lists == 1
    assert publisher.writes["create"] == 8  # the first publish and the repair, 4 slices each


class RecordedEvent(threading.Event):
    """The worker's wake-up event, recording how long each wait may last."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        return super().wait(timeout)


def test_no_list_while_the_watch_is_healthy(server: SimApiServer, make_publisher: Build) -> None:
    """One LIST at start; the watch ends every second here (timeoutSeconds) and is renewed from its last version,
    and the worker waits for a change with no deadline (no periodic re-list by default)."""
    options = PublisherOptions(backoff_initial=0.01, backoff_cap=0.1, debounce=0.01, watch_timeout=1)
    publisher = make_publisher(Source(10), options)
    publisher._dirty = wakeups = RecordedEvent()
    publisher.start()
    eventually(lambda: pool_consistent(slices(server), names(10)) and server.open_watches == 1, what="first publish")
    eventually(lambda: server.requests[("watch", "resourceslices")] >= 3, timeout=10, what="watches renewed")
    assert server.requests[LIST] == 1
    assert wakeups.timeouts and set(wakeups.timeouts) == {None}


def test_watch_timeouts_are_jittered_between_one_and_two_times_the_setting(server: SimApiServer, make_publisher: Build) -> None:
    publisher = make_publisher(Source(1), PublisherOptions(watch_timeout=300))
    asked: list[int] = []
    publisher._api.watch = lambda path, query: asked.append(int(query["timeoutSeconds"])) or iter(())  # type: ignore[method-assign,func-returns-value]
    for _ in range(40):
        publisher._watch_once("1")
    assert all(300 <= seconds < 600 for seconds in asked)
    assert len(set(asked)) > 10  # spread out, not one value for every node of a rollout


def test_every_request_carries_the_driver_user_agent(server: SimApiServer, make_publisher: Build) -> None:
    make_publisher(Source(10)).start()
    eventually(lambda: pool_consistent(slices(server), names(10)) and server.open_watches == 1, what="first publish")
    make_json_api(server.url)  # as the daemon builds its client
    agents = {record.headers.get("User-Agent") for record in server.request_log}
    assert agents == {USER_AGENT} and USER_AGENT.startswith("dra-driver/")
