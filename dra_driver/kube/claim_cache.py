"""An optional watch-fed cache of allocated ResourceClaims, to skip the GET in NodePrepareResources.

A background thread LISTs ResourceClaims in all namespaces, then WATCHes from
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

import logging
import threading
from typing import Any, Protocol

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from dra_driver.kube.claims import ResourceClaim
from dra_driver.kube.client import JsonApi, WatchStream
from dra_driver.common.logs import fields
from dra_driver.node.publisher.backoff import Backoff, jittered

log = logging.getLogger(__name__)

CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"  # all namespaces
_Key = tuple[str, str]


def _trimmed(obj: dict[str, Any]) -> dict[str, Any] | None:
    """What the plugin reads of a claim, or None when it is not allocated (nothing to serve)."""
    allocation = (obj.get("status") or {}).get("allocation")
    if not allocation:
        return None
    meta = obj.get("metadata") or {}
    keep = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
    return {"metadata": keep, "status": {"allocation": allocation}}


def _key(obj: dict[str, Any]) -> _Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class ClaimCache:
    """LIST+WATCH of ResourceClaims; lookup() returns a claim only when serving it is safe."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        watch_timeout_s: int = 300,
        backoff_initial_s: float = 0.5,
        backoff_cap_s: float = 30.0,
    ) -> None:
        self._api = JsonApi(api_client)
        self._watch_timeout_s = watch_timeout_s
        self._backoff = Backoff(backoff_initial_s, cap=backoff_cap_s)
        self._claims: dict[_Key, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._live = threading.Event()
        self._stop = threading.Event()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None
        self.lists = 0  # completed LISTs (tests and logs: how often it re-synced)

    # ---- lifecycle

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="claim-cache", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._live.clear()
        stream = self._stream
        if stream is not None:
            stream.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self._live.clear()  # again: the thread may have opened a watch between the first clear and the join

    def wait_live(self, timeout: float | None = None) -> bool:
        """Block until a list succeeded and its watch is open (tests, benchmarks)."""
        return self._live.wait(timeout)

    @property
    def live(self) -> bool:
        return self._live.is_set()

    # ---- reading

    def lookup(self, namespace: str, name: str, uid: str) -> ResourceClaim | None:
        """The cached claim if live, present, allocated and of this UID; None means: do a GET."""
        if not uid or not self._live.is_set():
            return None
        with self._lock:
            raw = self._claims.get((namespace, name))
        if raw is None or raw["metadata"].get("uid") != uid:
            return None
        try:
            return ResourceClaim.model_validate(raw)
        except Exception:  # an object the GET path would report properly
            return None

    # ---- the list/watch loop

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                version = self._list()
                while not self._stop.is_set():
                    version = self._watch_once(version)
                    self._backoff.reset()
            except Exception as exc:  # any failure: stop serving, re-list; the thread never dies
                self._live.clear()
                if self._stop.is_set():
                    return
                expired = isinstance(exc, ApiException) and exc.status == 410
                delay = 0.0 if expired else self._backoff.next_delay()
                log.info("claim cache watch ended; re-listing", extra=fields(error=_describe(exc), delay_s=round(delay, 2)))
                if self._stop.wait(delay):
                    return

    def _list(self) -> str:
        body = self._api.request("GET", CLAIMS_PATH)
        fresh: dict[_Key, dict[str, Any]] = {}
        for item in body.get("items") or []:
            kept = _trimmed(item)
            if kept is not None:
                fresh[_key(item)] = kept
        with self._lock:
            self._claims = fresh
        self.lists += 1
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    def _watch_once(self, version: str) -> str:
        query = {"timeoutSeconds": str(int(jittered(self._watch_timeout_s))), "allowWatchBookmarks": "true"}
        if version:
            query["resourceVersion"] = version
        stream = self._api.watch(CLAIMS_PATH, query)
        self._stream = stream
        if self._stop.is_set():  # stop() ran while the watch was opening and could not cut it
            stream.close()
            return version
        self._live.set()
        try:
            for event in stream:
                obj = event.get("object") or {}
                version = str((obj.get("metadata") or {}).get("resourceVersion") or "") or version
                self._apply(str(event.get("type")), obj)
                if self._stop.is_set():
                    break
        finally:
            self._stream = None
        if self._stop.is_set():
            return version
        # A normal end (timeoutSeconds): resume from `version`. Until then the cache may lag, so it is not live.
        self._live.clear()
        return version

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "BOOKMARK":
            return
        key = _key(obj)
        kept = _trimmed(obj) if kind in ("ADDED", "MODIFIED") else None
        with self._lock:
            if kept is None:
                self._claims.pop(key, None)
            else:
                self._claims[key] = kept


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


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
