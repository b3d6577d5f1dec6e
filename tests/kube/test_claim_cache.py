"""The watch-fed claim cache (dra_driver/kube/claim_cache.py): hits skip the GET, anything uncertain falls back to a GET.

Real kubernetes client against the in-process simulated API server; claim GETs
are counted from the server's request counters.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support import eventually
from dra_driver.simulation import api_server as sim_apiserver
from dra_driver.kube.claim_cache import CachedClaimReader, ClaimCache
from dra_driver.kube.claims import ClaimLookupError, ClaimReader
from dra_driver.simulation.claims import allocated_claim_object

DRIVER = "gpu.example.com"


def claim_gets(server: sim_apiserver.SimApiServer) -> int:
    return server.requests[("get", "resourceclaims")]


def put_claim(server: sim_apiserver.SimApiServer, name: str, device: str = "gpu-0", namespace: str = "default") -> str:
    stored = server.store.put(allocated_claim_object(name, namespace, DRIVER, "node-a", {"gpu": [device]}))
    return str(stored["metadata"]["uid"])


def put_unallocated(server: sim_apiserver.SimApiServer, name: str) -> str:
    body = allocated_claim_object(name, "default", DRIVER, "node-a", {"gpu": ["gpu-0"]})
    del body["status"]
    return str(server.store.put(body)["metadata"]["uid"])


def cached_device(cache: ClaimCache, name: str, uid: str) -> str | None:
    claim = cache.lookup("default", name, uid)
    if claim is None or claim.allocation is None or claim.allocation.devices is None:
        return None
    return claim.allocation.devices.results[0].device


@pytest.fixture
def cached(apiserver: sim_apiserver.SimApiServer) -> Iterator[CachedClaimReader]:
    api = apiserver.json_api()
    cache = ClaimCache(api, watch_timeout_s=30, backoff_initial_s=0.05, backoff_cap_s=0.2)
    cache.start()
    assert cache.wait_live(10)
    try:
        yield CachedClaimReader(ClaimReader(api), cache)
    finally:
        cache.stop()


def test_allocated_claim_with_matching_uid_is_served_without_a_get(apiserver: sim_apiserver.SimApiServer, cached: CachedClaimReader) -> None:
    uid = put_claim(apiserver, "c1", device="gpu-1")
    eventually(lambda: cached.cache.lookup("default", "c1", uid) is not None, what="claim in cache")
    before = claim_gets(apiserver)
    claim = cached.get("default", "c1", uid)
    assert claim_gets(apiserver) == before
    assert claim.metadata.uid == uid
    assert claim.allocation is not None and claim.allocation.devices is not None
    assert [r.device for r in claim.allocation.devices.results] == ["gpu-1"]
    assert cached.hits == 1 and cached.misses == 0


def test_claims_present_before_start_come_from_the_list(apiserver: sim_apiserver.SimApiServer) -> None:
    uid = put_claim(apiserver, "early", namespace="team-b")
    cache = ClaimCache(apiserver.json_api())
    cache.start()
    try:
        assert cache.wait_live(10)
        assert cache.lookup("team-b", "early", uid) is not None
        assert cache.lookup("default", "early", uid) is None  # keyed by namespace too
    finally:
        cache.stop()


def test_uid_mismatch_falls_back_to_a_get(apiserver: sim_apiserver.SimApiServer, cached: CachedClaimReader) -> None:
    uid = put_claim(apiserver, "c1")
    eventually(lambda: cached.cache.lookup("default", "c1", uid) is not None, what="claim in cache")
    before = claim_gets(apiserver)
    claim = cached.get("default", "c1", "some-other-uid")
    assert claim_gets(apiserver) == before + 1
    assert claim.metadata.uid == uid  # the live object; prepare then reports the UID mismatch


def test_unallocated_claim_falls_back_to_a_get_until_allocated(apiserver: sim_apiserver.SimApiServer, cached: CachedClaimReader) -> None:
    uid = put_unallocated(apiserver, "pending")
    time.sleep(0.2)  # give the watch time to deliver it: it must still not be served
    before = claim_gets(apiserver)
    claim = cached.get("default", "pending", uid)
    assert claim_gets(apiserver) == before + 1
    assert claim.allocation is None

    def allocate(obj: dict) -> None:
        obj["status"] = allocated_claim_object("pending", "default", DRIVER, "node-a", {"gpu": ["gpu-3"]})["status"]

    apiserver.modify_as_other("ResourceClaim", "pending", allocate, namespace="default")
    eventually(lambda: cached_device(cached.cache, "pending", uid) == "gpu-3", what="allocation seen")

    def deallocate(obj: dict) -> None:
        obj["status"] = {}

    apiserver.modify_as_other("ResourceClaim", "pending", deallocate, namespace="default")
    eventually(lambda: cached.cache.lookup("default", "pending", uid) is None, what="deallocation seen")


def test_deleted_and_recreated_claim_is_never_served_under_the_old_uid(apiserver: sim_apiserver.SimApiServer, cached: CachedClaimReader) -> None:
    old_uid = put_claim(apiserver, "c1", device="gpu-0")
    eventually(lambda: cached.cache.lookup("default", "c1", old_uid) is not None, what="old claim cached")
    apiserver.delete_as_other("ResourceClaim", "c1", namespace="default")
    eventually(lambda: cached.cache.lookup("default", "c1", old_uid) is None, what="delete seen")
    with pytest.raises(ClaimLookupError, match="not found"):
        cached.get("default", "c1", old_uid)  # the cache never answers "not found" itself: the GET does
    new_uid = put_claim(apiserver, "c1", device="gpu-2")
    assert new_uid != old_uid
    eventually(lambda: cached_device(cached.cache, "c1", new_uid) == "gpu-2", what="new claim cached")
    assert cached.cache.lookup("default", "c1", old_uid) is None


def test_outage_stops_serving_and_relist_catches_up(apiserver: sim_apiserver.SimApiServer, cached: CachedClaimReader) -> None:
    uid = put_claim(apiserver, "c1")
    eventually(lambda: cached.cache.lookup("default", "c1", uid) is not None, what="claim cached")
    lists = cached.cache.lists
    apiserver.stop()
    eventually(lambda: not cached.cache.live, what="cache not live after the outage")
    assert cached.cache.lookup("default", "c1", uid) is None  # nothing served while it may be stale
    # Changes while the cache is blind: delete c1, create c2.
    apiserver.delete_as_other("ResourceClaim", "c1", namespace="default")
    uid2 = put_claim(apiserver, "c2")
    apiserver.start()
    eventually(lambda: cached.cache.live and cached.cache.lists > lists, what="re-listed")
    assert cached.cache.lookup("default", "c1", uid) is None
    assert cached.cache.lookup("default", "c2", uid2) is not None


def test_dropped_watch_relists(apiserver: sim_apiserver.SimApiServer, cached: CachedClaimReader) -> None:
    eventually(lambda: cached.cache.live, what="cache live")  # its first list is done
    lists = cached.cache.lists
    # The watch may still be on its way to the server right after that: drop it once it is there.
    eventually(lambda: apiserver.drop_watches() >= 1, what="a watch to drop")
    uid = put_claim(apiserver, "after-drop")
    eventually(lambda: cached.cache.lists > lists, what="re-list after the drop")
    eventually(lambda: cached.cache.lookup("default", "after-drop", uid) is not None, what="claim seen after the drop")


def test_410_gone_relists(apiserver: sim_apiserver.SimApiServer) -> None:
    cache = ClaimCache(apiserver.json_api(), watch_timeout_s=1, backoff_initial_s=5.0)
    cache.start()
    try:
        assert cache.wait_live(10)
        lists = cache.lists
        apiserver.inject("watch", "resourceclaims", 410, count=1)  # the resumed watch after the 1 s timeout
        uid = put_claim(apiserver, "c1")
        # 410 re-lists at once (no 5 s backoff), and the claim is there.
        eventually(lambda: cache.lists > lists, timeout=4.0, what="re-list on 410")
        eventually(lambda: cache.lookup("default", "c1", uid) is not None, timeout=4.0, what="claim after the re-list")
    finally:
        cache.stop()
