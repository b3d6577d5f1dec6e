"""The reflector (claim cache, fleet exporter) reads the API server's watch cache: paginated, a re-list never older
than what it has seen, a consistent LIST (the one that falls back to etcd) only after a 410 or a cache that lags."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from dra_driver.kube import reflector as reflectors
from dra_driver.simulation.api_server import SimApiServer
from tests.support import eventually

NODES = "nodes"
Start = Callable[[], reflectors.Reflector]


@pytest.fixture
def server() -> Iterator[SimApiServer]:
    with SimApiServer() as srv:
        for i in range(3):
            srv.add_node(f"node-{i}")
        yield srv


@pytest.fixture
def start(server: SimApiServer) -> Iterator[Start]:
    started: list[reflectors.Reflector] = []

    def build() -> reflectors.Reflector:
        reflector = reflectors.Reflector(server.json_api(), "/api/v1/nodes", lambda obj: obj, NODES, backoff_initial_s=0.01)
        started.append(reflector.start())
        assert reflector.wait_live(10)
        return reflector

    yield build
    for reflector in started:
        reflector.stop()


def names(reflector: reflectors.Reflector) -> set[str]:
    return {name for _, name in (reflectors.object_key(o) for o in reflector.items())}


def test_the_first_list_is_read_from_the_cache_in_pages(server: SimApiServer, start: Start, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reflectors, "LIST_PAGE", 2)
    reflector = start()
    assert names(reflector) == {"node-0", "node-1", "node-2"}
    assert reflector.list_requests == 2  # two pages: resourceVersion=0 would have been answered whole
    assert server.consistent_lists(NODES) == 0


def test_a_relist_reads_the_cache_and_sees_at_least_what_the_watch_delivered(
    server: SimApiServer, start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed: list[set[str]] = []  # what each LIST gave, before its watch adds anything
    original = reflectors.Reflector._list

    def recording(self: reflectors.Reflector) -> str:
        version = original(self)
        listed.append(names(self))
        return version

    monkeypatch.setattr(reflectors.Reflector, "_list", recording)
    server.hold_cache()  # the cache stays at three nodes
    reflector = start()
    server.add_node("node-3")
    eventually(lambda: "node-3" in names(reflector), what="the watch delivers node-3")
    server.drop_watches()
    eventually(lambda: len(listed) == 2 and reflector.live, what="a re-list")
    assert listed == [{"node-0", "node-1", "node-2"}, {"node-0", "node-1", "node-2", "node-3"}]
    assert server.consistent_lists(NODES) == 0


def test_a_410_relists_consistently_once(server: SimApiServer, start: Start) -> None:
    reflector = start()
    server.inject("watch", NODES, 410, count=1)
    server.drop_watches()
    eventually(lambda: server.consistent_lists(NODES) == 1 and reflector.live, what="a consistent re-list")
    server.add_node("node-3")
    eventually(lambda: "node-3" in names(reflector), what="events after the re-list")
    time.sleep(0.2)
    assert server.consistent_lists(NODES) == 1


def test_a_cache_that_does_not_reach_the_version_seen_falls_back_to_one_consistent_list(server: SimApiServer, start: Start) -> None:
    server.hold_cache(catch_up=False)
    reflector = start()
    server.add_node("node-3")
    eventually(lambda: "node-3" in names(reflector), what="the watch delivers node-3")
    server.drop_watches()
    eventually(lambda: server.consistent_lists(NODES) == 1 and reflector.live, what="the consistent re-list")
    assert names(reflector) == {"node-0", "node-1", "node-2", "node-3"}
