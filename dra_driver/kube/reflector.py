"""One LIST+WATCH of one resource kept in memory: what an informer's reflector does, in plain JSON.

A background thread LISTs the resource (paginated, `limit`/`continue`), then WATCHes from the list's
resourceVersion with bookmarks on, and keeps per (namespace, name) what `keep` returns for each object
(a trimmed copy; None drops it). A watch that ends normally (its jittered `timeoutSeconds`) is resumed
from the last resourceVersion seen; 410 Gone (the server's history no longer reaches back) re-lists at
once; any other failure (an ERROR event, a broken stream, a refused request) re-lists after a jittered,
capped exponential backoff. The thread never dies of a failure.

Every LIST is served from the API server's watch cache (kube.client.cached_list_query), as client-go's
reflector does: the first any state of the cache, a re-list not older than the last version seen. A
consistent LIST (which falls back to reading the whole resource from etcd while the cache lags: at 5,000
nodes every ResourceSlice) only after a 410 or when the cache does not reach the version asked (504).

`live` says a list succeeded and the watch after it is open; `synced` that at least one list succeeded
(the store holds a whole, if possibly old, picture). `version` grows on every change of the store, so a
consumer can tell whether anything changed since it last looked. Used by the claim cache of the node
(claim_cache.py) and by `dra-driver fleet-exporter` (dra_driver/fleet/exporter.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from dra_driver.common.logs import fields
from dra_driver.kube.k8s import ApiException
from dra_driver.kube.client import JsonApi, WatchStream, cached_list_query, newer_version, too_large_version
from dra_driver.common.backoff import Backoff, jittered

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects
Keep = Callable[[dict[str, Any]], "dict[str, Any] | None"]
LIST_PAGE = 500  # objects per LIST page (kubectl's and client-go's chunk size)


def object_key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def describe_failure(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


class Reflector:
    """LIST+WATCH of `path` (e.g. /apis/resource.k8s.io/v1/resourceslices); the objects `keep` keeps, by key."""

    def __init__(
        self,
        api: JsonApi,
        path: str,
        keep: Keep,
        name: str,
        query: Mapping[str, str] | None = None,
        watch_timeout_s: int = 300,
        backoff_initial_s: float = 0.5,
        backoff_cap_s: float = 30.0,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.name = name  # what logs and metrics call the resource (resourceslices, resourceclaims, ...)
        self._api = api
        self._path = path
        self._query = dict(query or {})  # a labelSelector / fieldSelector for both LIST and WATCH
        self._keep = keep
        self._watch_timeout_s = watch_timeout_s
        self._backoff = Backoff(backoff_initial_s, cap=backoff_cap_s)
        self._on_change = on_change
        self._objects: dict[Key, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._live = threading.Event()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None
        self._seen: str | None = None  # the newest resourceVersion seen: a re-list is not older
        self._need_truth = False  # the next LIST is consistent (after a 410)
        self.lists = 0  # completed LISTs (a re-sync each after the first)
        self.list_requests = 0  # LIST requests sent, pages included
        self.watch_requests = 0  # WATCH requests opened
        self.events = 0  # watch events applied (bookmarks not counted)
        self.version = 0  # grows with every change of the store

    # ---- lifecycle

    def start(self) -> Reflector:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"reflector-{self.name}", daemon=True)
            self._thread.start()
        return self

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

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    @property
    def live(self) -> bool:
        return self._live.is_set()

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    # ---- reading

    def get(self, key: Key) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get(key)

    def items(self) -> list[dict[str, Any]]:
        """The kept objects now (the list is a copy; the objects are shared and must not be changed)."""
        with self._lock:
            return list(self._objects.values())

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
                self._need_truth = self._need_truth or expired
                delay = 0.0 if expired else self._backoff.next_delay()
                log.info("watch ended; re-listing", extra=fields(resource=self.name, error=describe_failure(exc), delay_s=round(delay, 2)))
                if self._stop.wait(delay):
                    return

    def _list(self) -> str:
        consistent, self._need_truth = self._need_truth, False
        try:
            version = self._list_pages(consistent)
        except ApiException as exc:
            if consistent or not too_large_version(exc):
                self._need_truth = self._need_truth or consistent
                raise
            log.info("the API server's cache lags behind; listing consistently", extra=fields(resource=self.name, since=self._seen))
            version = self._list_pages(True)
        self._seen = newer_version(self._seen, version)
        return version

    def _list_pages(self, consistent: bool) -> str:
        fresh: dict[Key, dict[str, Any]] = {}
        token = ""
        first = {} if consistent else cached_list_query(self._seen, paginated=True)
        while True:
            # Later pages name only their continue token: it carries the first page's version.
            query = {**self._query, "limit": str(LIST_PAGE), **({"continue": token} if token else first)}
            self.list_requests += 1
            body = self._api.request("GET", self._path, query)
            for item in body.get("items") or []:
                if isinstance(item, dict):
                    kept = self._keep(item)
                    if kept is not None:
                        fresh[object_key(item)] = kept
            meta = body.get("metadata") or {}
            token = str(meta.get("continue") or "")
            if not token:
                break
        with self._lock:
            self._objects = fresh
            self.version += 1
        self.lists += 1
        self._synced.set()
        self._changed()
        return str(meta.get("resourceVersion") or "")

    def _watch_once(self, version: str) -> str:
        query = {**self._query, "timeoutSeconds": str(int(jittered(self._watch_timeout_s))), "allowWatchBookmarks": "true"}
        if version:
            query["resourceVersion"] = version
        self.watch_requests += 1
        stream = self._api.watch(self._path, query)
        self._stream = stream
        if self._stop.is_set():  # stop() ran while the watch was opening and could not cut it
            stream.close()
            return version
        self._live.set()
        try:
            for event in stream:
                obj = event.get("object") or {}
                version = str((obj.get("metadata") or {}).get("resourceVersion") or "") or version
                self._seen = newer_version(self._seen, version)
                self._apply(str(event.get("type")), obj)
                if self._stop.is_set():
                    break
        finally:
            self._stream = None
        if self._stop.is_set():
            return version
        # A normal end (timeoutSeconds): resume from `version`. Until then the store may lag, so it is not live.
        self._live.clear()
        return version

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "BOOKMARK" or not isinstance(obj, dict):
            return
        key = object_key(obj)
        kept = self._keep(obj) if kind in ("ADDED", "MODIFIED") else None
        with self._lock:
            if kept is None:
                self._objects.pop(key, None)
            else:
                self._objects[key] = kept
            self.version += 1
        self.events += 1
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()
