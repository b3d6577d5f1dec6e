"""The publisher lists from the API server's watch cache, and a cache that lags behind never costs a duplicate slice,
a lost device or a write storm: a consistent LIST (the read that falls back to etcd) only once per failed
precondition, expired watch or cache that does not catch up."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from kubernetes.client.rest import ApiException

from dra_driver.node.publisher import SlicePublisher
from dra_driver.simulation.api_server import SimApiServer
from tests.node.publisher.conftest import FAST, NODE, Source, eventually, pool_consistent, slices

Build = Callable[..., SlicePublisher]
SLICES = "resourceslices"


def names(count: int) -> set[str]:
    return {f"gpu-{i}" for i in range(count)}


def models(server: SimApiServer) -> set[str]:
    return {d["attributes"]["model"]["string"] for o in slices(server) for d in o["spec"]["devices"]}


def sync_until_done(publisher: SlicePublisher, attempts: int = 3) -> int:
    """sync_once() until it succeeds (the worker's retry, without its backoff); how many attempts failed."""
    for failed in range(attempts):
        try:
            publisher.sync_once()
            return failed
        except ApiException:
            continue
    raise AssertionError(f"no successful sync in {attempts} attempts")


def test_first_publish_and_a_restart_read_only_the_cache_and_the_restart_writes_nothing(server: SimApiServer, make_publisher: Build) -> None:
    make_publisher(Source(100)).sync_once()
    assert pool_consistent(slices(server), names(100))
    restarted = make_publisher(Source(100))
    restarted.sync_once()
    assert sum(restarted.writes.values()) == 0
    assert server.consistent_lists(SLICES) == 0
    assert server.lists[(SLICES, "cache")] == 2


def test_relists_after_a_broken_watch_or_someone_elses_change_read_the_cache(server: SimApiServer, make_publisher: Build) -> None:
    make_publisher(Source(100)).start()
    eventually(lambda: pool_consistent(slices(server), names(100)) and server.open_watches == 1, what="first publish")
    server.drop_watches()
    eventually(lambda: server.open_watches == 1 and server.requests[("watch", SLICES)] >= 2, what="watch re-opened")
    server.modify_as_other("ResourceSlice", slices(server)[0]["metadata"]["name"], lambda o: o["spec"]["devices"].pop())
    eventually(lambda: pool_consistent(slices(server), names(100)), what="repair")
    assert server.consistent_lists(SLICES) == 0
    assert server.lists[(SLICES, "cache")] >= 3  # the first publish, after the dropped watch, the repair


def test_a_relist_behind_the_truth_still_sees_the_publishers_own_slices(server: SimApiServer, make_publisher: Build) -> None:
    """The cache stays where it was before the first publish; the relist after someone else's change asks for
    nothing older than the publisher's own writes, so it sees them and creates no duplicate."""
    server.hold_cache()
    publisher = make_publisher(Source(100)).start()
    eventually(lambda: pool_consistent(slices(server), names(100)) and server.open_watches == 1, what="first publish")
    server.modify_as_other("ResourceSlice", slices(server)[0]["metadata"]["name"], lambda o: o["spec"]["devices"].pop())
    eventually(lambda: pool_consistent(slices(server), names(100)), what="repair")
    time.sleep(0.3)  # room for a wrong duplicate and its clean-up
    assert len(slices(server)) == 2 and publisher.writes["create"] == 2
    assert server.consistent_lists(SLICES) == 0


def test_a_restart_on_a_cache_that_misses_the_pool_ends_with_one_pool_and_no_duplicate(server: SimApiServer, make_publisher: Build) -> None:
    """The restarted publisher's first list (resourceVersion=0) shows none of the slices that exist: it creates its
    own, and its watch, from the list's version, delivers the existing ones; the relist removes the duplicates."""
    server.hold_cache()
    make_publisher(Source(100)).sync_once()
    restarted = make_publisher(Source(100)).start()
    eventually(lambda: restarted.writes["delete"] == 2, what="the duplicates removed")
    eventually(lambda: pool_consistent(slices(server), names(100)) and len(slices(server)) == 2, what="one pool")
    time.sleep(0.3)  # room for a write storm
    # its creates, the generation bump of the two that stay, the two duplicates deleted: and nothing more
    assert restarted.writes == {"create": 2, "update": 2, "delete": 2}
    assert server.consistent_lists(SLICES) == 0


def test_a_cached_list_showing_a_wiped_slice_ends_in_one_consistent_list(server: SimApiServer, make_publisher: Build) -> None:
    """The kubelet wiped the pool; the cache still shows it. The update of a slice that is gone fails (404) and the
    next list is consistent: one, not a loop of updates against the same stale cache."""
    make_publisher(Source(10)).sync_once()
    server.hold_cache()
    server.delete_collection_as_other("ResourceSlice", spec__nodeName=NODE)
    source = Source(10)
    source.model = "A100"
    restarted = make_publisher(source)
    assert sync_until_done(restarted) == 1
    assert pool_consistent(slices(server), names(10)) and models(server) == {"A100"}
    assert server.consistent_lists(SLICES) == 1
    restarted.sync_once()  # and back to the cache
    assert server.consistent_lists(SLICES) == 1


def test_a_conflict_from_a_stale_list_costs_one_consistent_list(server: SimApiServer, make_publisher: Build) -> None:
    publisher = make_publisher(Source(10))
    publisher.sync_once()
    server.hold_cache()
    name = slices(server)[0]["metadata"]["name"]
    server.modify_as_other("ResourceSlice", name, lambda o: o["metadata"].setdefault("labels", {}).update(team="other"))
    publisher.set_device_health("gpu-3", healthy=False)
    assert sync_until_done(publisher) == 1  # the update with the cached resourceVersion: 409
    stored = slices(server)[0]
    assert stored["metadata"]["labels"]["team"] == "other"  # the retry wrote over the current object
    assert [d["name"] for d in stored["spec"]["devices"] if d.get("taints")] == ["gpu-3"]
    assert server.consistent_lists(SLICES) == 1


def test_a_cache_that_does_not_reach_the_version_asked_falls_back_to_one_consistent_list(
    server: SimApiServer, make_publisher: Build
) -> None:
    publisher = make_publisher(Source(10))
    publisher.sync_once()
    server.hold_cache(catch_up=False)
    publisher.set_device_health("gpu-1", healthy=False)
    publisher.sync_once()  # its own update is newer than the cache: the next list asks for it
    publisher.set_device_health("gpu-2", healthy=False)
    publisher.sync_once()
    assert server.consistent_lists(SLICES) == 1
    tainted = [d["name"] for d in slices(server)[0]["spec"]["devices"] if d.get("taints")]
    assert tainted == ["gpu-1", "gpu-2"] and len(slices(server)) == 1


def test_an_expired_watch_relists_consistently_once(server: SimApiServer, make_publisher: Build) -> None:
    """The watch ends (its timeout) and resumes from its version, which the server no longer has (410)."""
    publisher = make_publisher(Source(70), options=dataclasses.replace(FAST, watch_timeout=1)).start()
    eventually(lambda: pool_consistent(slices(server), names(70)) and server.open_watches == 1, what="publish and watch")
    server.add_node("node-x")  # a change this watch does not see, then the history forgotten
    server.store.compact()
    eventually(lambda: server.consistent_lists(SLICES) == 1, what="a consistent list after the 410")
    time.sleep(0.3)
    assert server.consistent_lists(SLICES) == 1 and publisher.writes == {"create": 2}


def test_withdraw_reads_the_truth(server: SimApiServer, make_publisher: Build) -> None:
    """Uninstall (a new publisher) removes every slice there is, whatever the cache shows."""
    server.hold_cache()
    make_publisher(Source(10)).sync_once()
    assert make_publisher(Source(10)).withdraw() == 1 and slices(server) == []
