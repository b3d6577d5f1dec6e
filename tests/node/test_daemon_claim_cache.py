"""The daemon given a claim cache (dra_driver/node/daemon.py): prepare reads a cached claim without a GET, a stale UID
still fails through one, and the cache stops with the daemon. The cache itself: tests/kube/test_claim_cache.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.node.conftest import make_settings
from tests.node.example_backend import DRIVER, ExampleBackend
from tests.support import eventually

from dra_driver.backend.interface import BackendSettings, ClaimRef
from dra_driver.kube.claim_cache import ClaimCache
from dra_driver.kube.claims import ClaimReader
from dra_driver.node.daemon import Daemon
from dra_driver.simulation.api_server import SimApiServer
from dra_driver.simulation.claims import allocated_claim_object

CLAIM_GETS = ("get", "resourceclaims")  # the server's request counter of claim GETs


def _daemon(root: Path, server: SimApiServer, cache: ClaimCache | None) -> Daemon:
    settings = make_settings(root)
    state = root / "state"
    state.mkdir(exist_ok=True)
    backend = ExampleBackend(BackendSettings(node_name="node-a", state_dir=state))
    return Daemon([backend], ClaimReader(server.json_api()), settings, claim_cache=cache)


@pytest.mark.parametrize("with_cache", [False, True])
def test_daemon_prepare_gets_claims_only_without_the_cache(short_tmp: Path, apiserver: SimApiServer, with_cache: bool) -> None:
    cache = ClaimCache(apiserver.json_api()) if with_cache else None
    daemon = _daemon(short_tmp, apiserver, cache)
    daemon.start()
    try:
        uid = apiserver.store.put(allocated_claim_object("c1", "default", DRIVER, "node-a", {"gpu": ["gpu-1"]}))["metadata"]["uid"]
        if cache is not None:
            eventually(lambda: cache.lookup("default", "c1", uid) is not None, what="claim cached")
        service = daemon.plugins[DRIVER].service
        before = apiserver.requests[CLAIM_GETS]
        outcome = service.prepare([ClaimRef("default", "c1", uid)])[uid]
        assert outcome.error == ""
        assert [d.device for d in outcome.devices] == ["gpu-1"]
        assert apiserver.requests[CLAIM_GETS] == before + (0 if with_cache else 1)
        # A stale kubelet request (old UID) still fails with the UID message, via a GET.
        stale = service.prepare([ClaimRef("default", "c1", "0000-old")])["0000-old"]
        assert "UID" in stale.error
        assert apiserver.requests[CLAIM_GETS] == before + (1 if with_cache else 2)
    finally:
        daemon.stop()
    if cache is not None:
        assert not cache.live  # stopped with the daemon
