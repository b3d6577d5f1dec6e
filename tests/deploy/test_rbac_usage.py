"""The ClusterRole grants exactly the verbs the daemon really sends to the API server.

A daemon with the slice publisher and the claim cache (`--claim-cache`) runs against the
simulated API server through its whole life (publish, delete an obsolete slice, health taint,
prepare through the cache and through a GET, stop); the verbs the server saw per resource must
equal what deploy/ grants.
"""

from __future__ import annotations

from pathlib import Path


from dra_driver.kube.claim_cache import ClaimCache
from dra_driver.node.daemon import Daemon
from dra_driver.kube.claims import ClaimReader
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.kube.client import make_json_api
from dra_driver.node.plugin.driver import PluginSettings
from dra_driver.node.publisher.daemon_adapter import publisher_factory
from dra_driver.simulation.api_server import SimApiServer
from dra_driver.backend.interface import BackendSettings, ClaimRef, HealthEvent
from tests.deploy.test_manifests import by_kind, render
from tests.node.publisher.conftest import FAST, NODE, device_names, eventually, slices
from tests.node.publisher.test_daemon_wiring import ToyBackend

DRIVER = "gpu.example.com"


def _slice(name: str, pool: str) -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": NODE,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "old-0"}],
        },
    }


def make_daemon(root: Path, server: SimApiServer, backends: list[ToyBackend], claim_cache: ClaimCache) -> Daemon:
    (root / "boot_id").write_text("boot-1\n")
    settings = PluginSettings(
        node_name=NODE, kubelet_dir=root / "kubelet", cdi_dir=root / "cdi", boot_id_path=root / "boot_id", prepare_workers=2, grpc_workers=8
    )
    api = make_json_api(server.url)
    return Daemon(backends, ClaimReader(api), settings, publisher_factory=publisher_factory(api, NODE, FAST), claim_cache=claim_cache)


def granted_verbs(overlay: str) -> dict[str, set[str]]:
    (role,) = by_kind(render(overlay), "ClusterRole")
    granted: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for resource in rule["resources"]:
            granted.setdefault(resource, set()).update(rule["verbs"])
    return granted


def test_cluster_role_verbs_equal_the_verbs_the_daemon_uses(short_tmp: Path) -> None:
    """With the claim cache (overlay all-claim-cache): every verb granted is used, none missing."""
    granted = granted_verbs("all-claim-cache")
    with SimApiServer() as server:
        server.add_node(NODE)
        stored = server.store.put(allocated_claim_object("c1", "default", DRIVER, NODE, {"gpu": ["gpu-0"]}))
        stale = server.store.put(_slice("stale", pool="old-pool"))  # from an earlier run: obsolete
        server.reset_counters()
        backend = ToyBackend(DRIVER, BackendSettings(node_name=NODE, partitioning="static"))
        cache = ClaimCache(server.json_api())
        daemon = make_daemon(short_tmp, server, [backend], claim_cache=cache)
        daemon.start()
        try:
            eventually(lambda: device_names(slices(server, driver=DRIVER)) == {"gpu-0", "gpu-1"}, what="published, stale slice gone")
            backend.health.put(HealthEvent(device="gpu-1", healthy=False, reason="XID 79"))
            eventually(lambda: any(d.get("taints") for o in slices(server, driver=DRIVER) for d in o["spec"]["devices"]), what="taint published")
            assert cache.wait_live(10)
            service = daemon.plugins[DRIVER].service
            outcome = service.prepare([ClaimRef("default", "c1", stored["metadata"]["uid"])])  # from the cache
            assert outcome[stored["metadata"]["uid"]].error == ""
            old_uid = service.prepare([ClaimRef("default", "c1", "uid-of-a-deleted-claim")])  # not cached: a GET
            assert "UID" in old_uid["uid-of-a-deleted-claim"].error
        finally:
            daemon.stop()
        assert stale["metadata"]["name"] not in {o["metadata"]["name"] for o in slices(server, driver=DRIVER)}
        used: dict[str, set[str]] = {}
        for verb, plural in server.requests:
            used.setdefault(plural, set()).add(verb)
    # slices(server) above reads the store directly, so every counted request came from the daemon.
    assert used == granted
