"""An optional watch-fed cache of allocated ResourceClaims, to skip the GET in NodePrepareResources.

A reflector (dra_driver/kube/reflector.py) LISTs ResourceClaims in all namespaces, then WATCHes from
the list's resourceVersion (bookmarks on), and keeps, per (namespace, name),
the identity and `status.allocation` of every *allocated* claim (other fields
are dropped to keep memory small). A watch that ends normally is resumed from
the last resourceVersion; 410 Gone, an ERROR event or a broken stream makes it
re-list, with backoff for anything but 410.

The cache answers only when that is safe; otherwise the caller does a live GET:
- it is live: a list succeeded and the watch stream after it is open. While it
  is down (between a failure and the next list) every lookup misses, so a
  long outage can never serve stale data;
- the claim is present with the UID the kubelet asked for (a claim deleted and
  re-created under the same name has a new UID, so a lagging cache misses);
- `status.allocation` is set (a claim that was deallocated is removed on the
  MODIFIED event).
It never answers "not found": absence means "ask the API server".

Residual risk, stated plainly: a claim can be deallocated and re-allocated
under the same UID (allocation is immutable only while set). If the watch lags
behind both changes *and* the kubelet's prepare for the new pod, the old
allocation would be served. A healthy watch lags by milliseconds, far less than
scheduling a pod and starting it, which is the bet every informer-based
controller makes; the option is off by default (see docs/plugin.md).
"""

from __future__ import annotations

from typing import Any, Protocol

from dra_driver.kube.client import JsonApi
from dra_driver.model.resource_v1 import ResourceClaim
from dra_driver.kube.reflector import Reflector

CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"  # all namespaces


def _trimmed(obj: dict[str, Any]) -> dict[str, Any] | None:
    """What the plugin reads of a claim, or None when it is not allocated (nothing to serve)."""
    allocation = (obj.get("status") or {}).get("allocation")
    if not allocation:
        return None
    meta = obj.get("metadata") or {}
    keep = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
    return {"metadata": keep, "status": {"allocation": allocation}}


class ClaimCache:
    """LIST+WATCH of ResourceClaims (dra_driver/kube/reflector.py); lookup() returns a claim only when serving it is safe."""

    def __init__(
        self,
        api: JsonApi,
        watch_timeout_s: int = 300,
        backoff_initial_s: float = 0.5,
        backoff_cap_s: float = 30.0,
    ) -> None:
        self._reflector = Reflector(
            api, CLAIMS_PATH, _trimmed, "resourceclaims",
            watch_timeout_s=watch_timeout_s, backoff_initial_s=backoff_initial_s, backoff_cap_s=backoff_cap_s,
        )  # fmt: skip

    # ---- lifecycle

    def start(self) -> None:
        self._reflector.start()

    def stop(self) -> None:
        self._reflector.stop()

    def wait_live(self, timeout: float | None = None) -> bool:
        """Block until a list succeeded and its watch is open (tests, benchmarks)."""
        return self._reflector.wait_live(timeout)

    @property
    def live(self) -> bool:
        return self._reflector.live

    @property
    def lists(self) -> int:
        """Completed LISTs (tests and logs: how often it re-synced)."""
        return self._reflector.lists

    # ---- reading

    def lookup(self, namespace: str, name: str, uid: str) -> ResourceClaim | None:
        """The cached claim if live, present, allocated and of this UID; None means: do a GET."""
        if not uid or not self._reflector.live:
            return None
        raw = self._reflector.get((namespace, name))
        if raw is None or raw["metadata"].get("uid") != uid:
            return None
        try:
            return ResourceClaim.model_validate(raw)
        except Exception:  # an object the GET path would report properly
            return None


class _LiveSource(Protocol):
    def get(self, namespace: str, name: str, uid: str = "", deadline: float | None = None) -> ResourceClaim: ...


class CachedClaimReader:
    """A ClaimSource that answers from the cache when safe and asks `reader` (a GET) otherwise."""

    def __init__(self, reader: _LiveSource, cache: ClaimCache) -> None:
        self.reader = reader
        self.cache = cache
        self.hits = 0
        self.misses = 0

    def get(self, namespace: str, name: str, uid: str = "", deadline: float | None = None) -> ResourceClaim:
        cached = self.cache.lookup(namespace, name, uid)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        return self.reader.get(namespace, name, uid, deadline)
