"""Keep one (node, driver) pool of ResourceSlices published, and keep it right.

`SlicePublisher` owns the slices with `spec.nodeName=<node>` and
`spec.driver=<driver>` and nothing else. It:
- reconciles desired slices (the backend's inventory plus health taints)
  against what the API server holds (plan.plan_pool decides the writes);
- creates slices with `generateName: <node>-<driver>-` and a controller
  ownerReference to the Node, so they disappear with the Node;
- deletes obsolete slices with uid + resourceVersion preconditions;
- watches its slices and repairs them when someone else deletes or changes
  them (the kubelet wipes all of a node's slices when it starts). While the
  watch is healthy nothing is listed again: it is renewed from its last
  resourceVersion after a jittered 5-10 minutes, and only a broken or expired
  watch (or someone else's change) leads to a LIST. The watch may deliver this
  publisher's own write before the write's response has recorded its
  resourceVersion: events arriving while writes are in flight are judged once
  the writes are done, so an own write never leads to a re-list;
- lists from the API server's watch cache, never with a consistent read
  unless correctness needs one (a consistent read falls back to etcd while the
  cache lags, and etcd cannot filter by field: it reads every slice of the
  cluster): the first LIST asks resourceVersion=0 (any state, as client-go's
  informers), every later one NotOlderThan the newest version this publisher
  has seen (its own writes, the watch events that led to it), so a relist
  always includes its own writes and the change it reacts to. A cache behind
  the truth can show a slice that is gone or changed (the write's
  precondition fails: 404/409) or miss one that exists (the watch, started
  from the list's version, then delivers it: a relist repairs the pool, removing
  a duplicate); after a failed precondition, a 410 from the watch or a cache
  that does not reach the version asked, the next LIST is consistent, once;
- retries with capped, jittered exponential backoff (honouring Retry-After)
  on conflicts, throttling, server errors and connection errors;
- notices when the API server silently drops fields whose feature gate is
  off: without DRAPartitionableDevices it falls back to static partitions,
  without DRADeviceTaints it withdraws unhealthy devices instead of tainting;
- labels what it writes (`dra-driver.io/publisher`, field manager `dra-driver`)
  and stands down when a slice of its pool was written by another driver of
  the same name (node_checks.same_name): its own slices are withdrawn, the
  other's never touched, nothing is written until the other is gone;
- keeps the annotations a `notes` source gives (key -> text, None to remove)
  on every slice of the pool: what the pool leaves out and why
  (`dra-driver.io/withheld-devices`, node_checks.coexistence).

`sync_once()` runs one reconciliation synchronously (tests, benchmarks);
`start()` runs the reconcile worker and the watch in two daemon threads.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import urllib3

from dra_driver.common.errors import DraError
from dra_driver.kube.client import JsonApi, WatchStream, cached_list_query, newer_version, too_large_version
from dra_driver.kube.k8s import ApiException
from dra_driver.common.logs import fields
from dra_driver.model.device import DeviceTaint, Inventory, TaintEffect
from dra_driver.model.api_group import API_VERSION
from dra_driver.node.checks.same_name import (
    FIELD_MANAGER,
    OWNER_LABEL,
    OWNER_VALUE,
    ConflictBoard,
    conflict_message,
    describe_foreign,
    written_by_other,
)
from dra_driver.common.backoff import Backoff, jittered
from dra_driver.node.publisher.desired import desired_specs, strip_consumable, strip_partitioning
from dra_driver.node.publisher.plan import Plan, carry_taint_times, dropped_fields, plan_pool
from dra_driver.backend.interface import HealthEvent, Partitioning

log = logging.getLogger(__name__)
JsonObject = dict[str, Any]
# Asked again with "static" when the API server drops partitionable-device fields.
InventorySource = Callable[[Partitioning], Inventory]
_RETRYABLE = (ApiException, urllib3.exceptions.HTTPError, OSError)
SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
NODES_PATH = "/api/v1/nodes"


@dataclass(frozen=True)
class PublisherOptions:
    partitioning: Partitioning = "static"
    pool_name: str | None = None  # default: the node name
    # A periodic full re-list even without events; None: never while the watch is healthy (each one is a consistent
    # LIST at the API server: 500 a minute at 5,000 nodes for 600 s). Jittered by up to 50% when set.
    resync_interval: float | None = None
    watch_timeout: int = 300  # seconds per watch request, jittered up to twice that; then renewed from its version
    debounce: float = 0.05  # coalesce bursts of events into one reconciliation
    backoff_initial: float = 1.0
    backoff_cap: float = 300.0
    health_taint_key: str | None = None  # default "<driver>/unhealthy"
    health_taint_effect: TaintEffect = "NoSchedule"


class _FieldsDropped(Exception):
    """Internal: the server dropped fields; re-plan with the fallback in place."""


class SameNameConflict(DraError):
    """Another driver of this name publishes on this node: the publisher stands down (the message says what to do)."""


class SlicePublisher:
    def __init__(
        self,
        api: JsonApi,
        node_name: str,
        driver: str,
        inventory_source: InventorySource,
        options: PublisherOptions | None = None,
        conflicts: ConflictBoard | None = None,
        notes: Callable[[], Mapping[str, str | None]] | None = None,
    ) -> None:
        self.node_name = node_name
        self.driver = driver
        self.options = options or PublisherOptions()
        self.pool_name = self.options.pool_name or node_name
        self._api = api
        self._source = inventory_source
        self._partitioning: Partitioning = self.options.partitioning
        self._taints_supported = True
        self._consumable_supported = True
        self._inventory: Inventory | None = None
        self._unhealthy: dict[str, DeviceTaint] = {}
        self._last_generation: int | None = None
        self._own_versions: set[str] = set()
        self._writing = 0  # reconciliations with writes in flight
        self._deferred: list[tuple[str, JsonObject]] = []  # (version, event) seen while writing, judged after
        self._node_uid: str | None = None
        self._list_version: str | None = None
        self._seen_version: str | None = None  # newest resourceVersion seen (lists, own writes, watch events)
        self._need_truth = False  # the next LIST is consistent: a precondition failed or the watch expired
        self._syncs = 0
        self.writes: Counter[str] = Counter()  # create/update/delete sent by this publisher and accepted
        self._lock = threading.RLock()  # state above
        self._sync_lock = threading.Lock()  # one reconciliation at a time
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._synced = threading.Condition()
        self._watch: WatchStream | None = None
        self._threads: list[threading.Thread] = []
        self._backoff = Backoff(self.options.backoff_initial, cap=self.options.backoff_cap)
        self._last_error = ""  # of the current streak of failed syncs: a repeat is logged at debug
        self.conflicts = conflicts or ConflictBoard()  # shared with prepare (dra_driver.node.daemon) when given
        self._notes = notes or dict
        self.slice_count = 0  # slices of the pool as last reconciled (dra_driver_pool_slices)
        self.failures = 0  # reconciliations that failed (dra_driver_publish_errors_total); one thread writes it
        self._look_again = self._dirty.set  # a conflict found or gone (the daemon re-checks the registrations)

    # ------------------------------------------------------------------ public API

    @property
    def field_selector(self) -> str:
        return f"spec.nodeName={self.node_name},spec.driver={self.driver}"

    @property
    def partitioning(self) -> Partitioning:
        return self._partitioning

    @property
    def taints_supported(self) -> bool:
        return self._taints_supported

    @property
    def generation(self) -> int | None:
        return self._last_generation

    @property
    def sync_count(self) -> int:
        return self._syncs

    def refresh_inventory(self) -> None:
        """Ask the backend again (hardware changed) and republish."""
        with self._lock:
            self._inventory = None
        self._dirty.set()

    def set_device_health(self, device: str, healthy: bool, taint: DeviceTaint | None = None) -> bool:
        """Taint (or withdraw) an unhealthy device, untaint a healthy one; True if anything changed."""
        with self._lock:
            if healthy:
                changed = self._unhealthy.pop(device, None) is not None
            else:
                taint = taint or DeviceTaint(key=self.options.health_taint_key or f"{self.driver}/unhealthy", effect=self.options.health_taint_effect)
                changed = self._unhealthy.get(device) != taint
                self._unhealthy[device] = taint
        if changed:
            log.info("device health changed", extra=fields(driver=self.driver, device=device, healthy=healthy))
            self._dirty.set()
        return changed

    def apply_health_event(self, event: HealthEvent) -> bool:
        return self.set_device_health(event.device, event.healthy, event.taint)

    def sync_once(self) -> Plan:
        """Reconcile once; raises the API error that stopped it (the worker retries with backoff)."""
        with self._sync_lock:
            for _ in range(4):  # at most: partitioning, taint and consumable-capacity fallbacks, then a clean pass
                try:
                    plan = self._reconcile()
                except _FieldsDropped:
                    continue
                except SameNameConflict:
                    self._count_sync()  # standing down is this pass's outcome: the watch may start from its list
                    raise
                self._count_sync()
                return plan
            return self._reconcile()

    def _count_sync(self) -> None:
        with self._synced:
            self._syncs += 1
            self._synced.notify_all()

    def start(self) -> SlicePublisher:
        self._stop.clear()
        self._dirty.set()
        self.conflicts.subscribe(self.driver, self._look_again)
        for target, name in ((self._run_worker, "publisher"), (self._run_watch, "publisher-watch")):
            thread = threading.Thread(target=target, name=f"{name}-{self.driver}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the threads; the slices stay (the kubelet removes them if the driver stays away)."""
        self.conflicts.unsubscribe(self.driver, self._look_again)
        self._stop.set()
        self._dirty.set()
        current = self._watch
        if current is not None:
            current.stop()
        with self._synced:
            self._synced.notify_all()
        for thread in self._threads:
            thread.join(timeout)
        self._threads.clear()

    def wait_synced(self, after: int = 0, timeout: float = 10.0) -> bool:
        """Wait until more than `after` reconciliations have succeeded."""
        with self._synced:
            return self._synced.wait_for(lambda: self._syncs > after or self._stop.is_set(), timeout) and self._syncs > after

    def withdraw(self) -> int:
        """Delete every slice of this (node, driver) that this driver wrote (uninstall); returns how many."""
        own = [obj for obj in self._list(consistent=True) if not written_by_other(obj)]
        for obj in own:
            self._delete(obj)
        return len(own)

    # ------------------------------------------------------------------ reconciliation

    def _current_inventory(self) -> Inventory:
        with self._lock:
            if self._inventory is None:
                inventory = self._source(self._partitioning)
                if self._partitioning == "static" and (inventory.counter_sets or any(d.consumes_counters for d in inventory.devices)):
                    inventory = strip_partitioning(inventory)
                if not self._consumable_supported and any(d.allow_multiple_allocations for d in inventory.devices):
                    inventory = strip_consumable(inventory)
                if inventory.driver != self.driver:
                    raise ValueError(f"inventory source returned driver {inventory.driver!r}, expected {self.driver!r}")
                self._inventory = inventory
            return self._inventory

    def _reconcile(self) -> Plan:
        inventory = self._current_inventory()
        with self._lock:
            unhealthy = dict(self._unhealthy)
            taints = self._taints_supported
        desired = desired_specs(inventory, self.node_name, self.pool_name, unhealthy, taints)
        existing = self._list()
        self._stand_down_if_shared(existing)
        plan = plan_pool(desired, existing, self.pool_name, self._last_generation)
        if plan.writes:
            log.info(
                "publishing slices",
                extra=fields(
                    driver=self.driver, generation=plan.generation, create=len(plan.creates), update=len(plan.updates), delete=len(plan.deletes)
                ),
            )
        # Recorded before writing: a half-written bump must not be reused after a wipe.
        self._last_generation = plan.generation
        self.slice_count = len(desired)  # dra_driver_pool_slices
        # New generation first, then remove the old: consumers never see an empty pool.
        with self._own_writes():
            for obj, spec in plan.updates:
                self._check_dropped(spec, self._update(obj, spec))
            for spec in plan.creates:
                self._check_dropped(spec, self._create(spec))
            for obj in plan.deletes:
                self._delete(obj)
            self._refresh_notes(existing, plan)
        return plan

    @contextmanager
    def _own_writes(self) -> Iterator[None]:
        """Writes in flight: the watch defers events it cannot yet tell as ours (the write's response, which
        names its resourceVersion, may come after the event); those still unknown after the writes are someone else's."""
        with self._lock:
            self._writing += 1
        try:
            yield
        finally:
            with self._lock:
                self._writing -= 1
                deferred = [] if self._writing else self._deferred
                if not self._writing:
                    self._deferred = []
                foreign = [event for version, event in deferred if version not in self._own_versions]
            for event in foreign:
                self._someone_else_changed(event)

    def _refresh_notes(self, existing: list[JsonObject], plan: Plan) -> None:
        """Slices this pass did not write get the current annotations too (a metadata-only update)."""
        written = {id(obj) for obj, _ in plan.updates} | {id(obj) for obj in plan.deletes}
        for obj in existing:
            if id(obj) not in written and _with_notes(obj["metadata"], self._notes()) != obj["metadata"]:
                self._update(obj, obj.get("spec") or {})

    def _stand_down_if_shared(self, existing: list[JsonObject]) -> None:
        """Raise SameNameConflict (after withdrawing our own slices) while another same-name driver is on the node."""
        foreign = [obj for obj in existing if written_by_other(obj)]
        found = conflict_message(self.driver, self.node_name, f"its ResourceSlices {describe_foreign(foreign)}") if foreign else None
        self.conflicts.set(self.driver, "slices", found)
        conflict = self.conflicts.get(self.driver)
        if conflict is None:
            return
        for obj in existing:
            if not written_by_other(obj):
                self._delete(obj)
        raise SameNameConflict(conflict)

    def _check_dropped(self, sent: JsonObject, stored: JsonObject) -> None:
        dropped = dropped_fields(sent, stored.get("spec") or {})
        if dropped.partitioning:
            log.warning(
                "the API server dropped sharedCounters/consumesCounters (feature gate DRAPartitionableDevices is off); "
                "falling back to static partitioning",
                extra=fields(driver=self.driver, node=self.node_name),
            )
            with self._lock:
                self._partitioning = "static"
                self._inventory = None
            raise _FieldsDropped()
        if dropped.consumable:
            log.warning(
                "the API server dropped allowMultipleAllocations/requestPolicy (feature gate DRAConsumableCapacity is off); "
                "devices are published for one claim at a time instead",
                extra=fields(driver=self.driver, node=self.node_name),
            )
            with self._lock:
                self._consumable_supported = False
                self._inventory = None
            raise _FieldsDropped()
        if dropped.taints:
            log.warning(
                "the API server dropped device taints (feature gate DRADeviceTaints is off); unhealthy devices are withdrawn from the slices instead",
                extra=fields(driver=self.driver, node=self.node_name),
            )
            with self._lock:
                self._taints_supported = False
            raise _FieldsDropped()

    # ------------------------------------------------------------------ API calls

    def _list(self, consistent: bool = False) -> list[JsonObject]:
        """This pool's slices: from the watch cache (cached_list_query), or a consistent read when asked or needed."""
        with self._lock:
            wanted, self._need_truth = self._need_truth, False
            since = self._seen_version
        query = {"fieldSelector": self.field_selector}
        try:
            if consistent or wanted:
                body = self._api.request("GET", SLICES_PATH, query)
            else:
                try:
                    body = self._api.request("GET", SLICES_PATH, {**query, **cached_list_query(since)})
                except ApiException as exc:
                    if not too_large_version(exc):
                        raise
                    log.info("the API server's cache lags behind; listing consistently", extra=fields(driver=self.driver, since=since))
                    body = self._api.request("GET", SLICES_PATH, query)
        except BaseException:
            if wanted:
                self._want_truth()
            raise
        self._list_version = body.get("metadata", {}).get("resourceVersion")
        self._saw(self._list_version)
        # Defence in depth: never touch another node's or driver's slice, whatever the server returned.
        return [
            item
            for item in body.get("items") or []
            if (item.get("spec") or {}).get("nodeName") == self.node_name and (item.get("spec") or {}).get("driver") == self.driver
        ]

    def _owner_references(self) -> list[JsonObject]:
        if self._node_uid is None:
            try:
                node = self._api.request("GET", f"{NODES_PATH}/{self.node_name}")
            except ApiException as exc:
                if exc.status != 404:
                    raise
                log.warning("node object not found; publishing slices without an owner", extra=fields(node=self.node_name))
                return []
            self._node_uid = node["metadata"]["uid"]
        return [{"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": self._node_uid, "controller": True}]

    def _saw(self, version: str | None) -> None:
        with self._lock:
            self._seen_version = newer_version(self._seen_version, version)

    def _want_truth(self) -> None:
        with self._lock:
            self._need_truth = True

    def _precondition_failed(self, exc: ApiException, verb: str, name: str) -> None:
        """A write based on a list that was behind (409 Conflict / AlreadyExists, 404 on update): the retry lists consistently."""
        log.info(
            "slice write refused: the list was behind; listing consistently",
            extra=fields(driver=self.driver, verb=verb, slice=name, status=exc.status),
        )
        self._want_truth()

    def _remember(self, stored: JsonObject) -> JsonObject:
        version = str(stored.get("metadata", {}).get("resourceVersion"))
        self._saw(version)
        with self._lock:
            self._own_versions.add(version)
            if len(self._own_versions) > 4096:
                self._own_versions = set(sorted(self._own_versions, key=lambda v: int(v) if v.isdigit() else 0)[-2048:])
        return stored

    def _create(self, spec: JsonObject) -> JsonObject:
        body = {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {
                "generateName": f"{self.node_name}-{self.driver}-",
                "labels": {OWNER_LABEL: OWNER_VALUE},
                "ownerReferences": self._owner_references(),
                **_with_notes({}, self._notes()),
            },
            "spec": spec,
        }
        try:
            stored = self._api.request("POST", SLICES_PATH, {"fieldManager": FIELD_MANAGER}, body=body)
        except ApiException as exc:
            if exc.status == 409:
                self._precondition_failed(exc, "create", f"{self.node_name}-{self.driver}-")
            raise
        self.writes["create"] += 1
        return self._remember(stored)

    def _update(self, existing: JsonObject, spec: JsonObject) -> JsonObject:
        metadata = {k: v for k, v in existing["metadata"].items() if k not in ("managedFields", "creationTimestamp", "generation")}
        if not metadata.get("ownerReferences"):
            metadata["ownerReferences"] = self._owner_references()
        metadata["labels"] = {**(metadata.get("labels") or {}), OWNER_LABEL: OWNER_VALUE}
        metadata = _with_notes(metadata, self._notes())
        body = {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": metadata, "spec": carry_taint_times(spec, existing.get("spec") or {})}
        name = existing["metadata"]["name"]
        try:
            stored = self._api.request("PUT", f"{SLICES_PATH}/{name}", {"fieldManager": FIELD_MANAGER}, body=body)
        except ApiException as exc:
            if exc.status in (404, 409):
                self._precondition_failed(exc, "update", name)
            raise
        self.writes["update"] += 1
        return self._remember(stored)

    def _delete(self, existing: JsonObject) -> None:
        meta = existing["metadata"]
        preconditions = {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}
        try:
            stored = self._api.request("DELETE", f"{SLICES_PATH}/{meta['name']}", body={"preconditions": preconditions})
        except ApiException as exc:
            if exc.status == 404:
                return  # already gone: what we wanted
            if exc.status == 409:
                self._precondition_failed(exc, "delete", meta["name"])
            raise
        self.writes["delete"] += 1
        self._remember(stored)

    # ------------------------------------------------------------------ threads

    def _run_worker(self) -> None:
        while not self._stop.is_set():
            interval = self.options.resync_interval
            self._dirty.wait(jittered(interval, 0.5) if interval is not None else None)
            if self._stop.is_set():
                return
            # Cleared after the debounce window, so a burst of changes (a kubelet wiping the pool: one event per
            # slice) costs one sync, not one more for the events that fell into the window.
            if self._stop.wait(self.options.debounce):
                return
            self._dirty.clear()
            try:
                self.sync_once()
                if self._backoff.failures:  # the other end of the warning below: the outage is over
                    log.warning("publishing slices works again", extra=fields(driver=self.driver, failed_attempts=self._backoff.failures))
                self._backoff.reset()
            except SameNameConflict:  # logged by the board when found; checked again on the next change or resync
                continue
            except _RETRYABLE as exc:
                self.failures += 1
                delay = self._backoff.next_delay(_retry_after(exc))
                # One warning per outage (its first failure, or a new reason), not one per retry: an unreachable server
                # would otherwise print a line every few seconds for as long as it lasts.
                error = _describe(exc)
                level = logging.WARNING if self._backoff.failures == 1 or error != self._last_error else logging.DEBUG
                self._last_error = error
                log.log(
                    level, "publishing slices failed; retrying with backoff", extra=fields(driver=self.driver, error=error, retry_in=round(delay, 3))
                )
                if self._stop.wait(delay):
                    return
                self._dirty.set()
            except Exception as exc:  # a bug or an invalid inventory: keep the daemon alive, retry slowly
                self.failures += 1
                delay = self._backoff.next_delay()
                log.error("publishing slices failed", extra=fields(driver=self.driver, error=str(exc)), exc_info=True)
                if self._stop.wait(delay):
                    return
                self._dirty.set()

    def _run_watch(self) -> None:
        backoff = Backoff(self.options.backoff_initial, cap=self.options.backoff_cap)
        version: str | None = None
        first = True
        while not self._stop.is_set():
            if version is None:
                # Start from a list that a successful sync made, so no change falls in a gap: at start the
                # first sync (start() asked for it), after a broken watch a new one.
                seen = 0 if first else self._syncs
                if not first:
                    self._dirty.set()
                first = False
                with self._synced:
                    self._synced.wait_for(lambda: self._syncs > seen or self._stop.is_set())
                if self._stop.is_set():
                    return
                version = self._list_version
            try:
                version = self._watch_once(version)
                backoff.reset()
            except Exception as exc:  # any broken stream: re-list and watch again, never let the thread die
                if self._stop.is_set():
                    return
                if isinstance(exc, ApiException) and exc.status == 410:
                    self._want_truth()  # the history no longer reaches back: a cached list could be as old
                level = logging.INFO if isinstance(exc, _RETRYABLE) else logging.ERROR
                log.log(level, "slice watch ended; resyncing", extra=fields(driver=self.driver, error=_describe(exc)))
                version = None
                if self._stop.wait(backoff.next_delay(_retry_after(exc))):
                    return

    def _watch_once(self, version: str | None) -> str | None:
        timeout = int(jittered(self.options.watch_timeout))
        query = {"fieldSelector": self.field_selector, "timeoutSeconds": str(timeout), "allowWatchBookmarks": "true"}
        if version:
            query["resourceVersion"] = version
        stream = self._api.watch(SLICES_PATH, query)
        self._watch = stream
        try:
            for event in stream:
                raw = event.get("object") or {}
                event_version = str((raw.get("metadata") or {}).get("resourceVersion") or "")
                version = event_version or version
                self._saw(event_version)
                if event.get("type") == "BOOKMARK":
                    continue
                with self._lock:
                    ours = event_version in self._own_versions
                    if not ours and self._writing:
                        self._deferred.append((event_version, event))
                        ours = True  # for now: judged when the writes are done
                if not ours:
                    self._someone_else_changed(event)
                if self._stop.is_set():
                    break
        finally:
            self._watch = None
        return version


    def _someone_else_changed(self, event: JsonObject) -> None:
        raw = event.get("object") or {}
        log.info(
            "slice changed by someone else", extra=fields(driver=self.driver, event=event.get("type"), slice=(raw.get("metadata") or {}).get("name"))
        )
        self._dirty.set()


def _with_notes(metadata: Mapping[str, Any], notes: Mapping[str, str | None]) -> JsonObject:
    """`metadata` with the notes applied to its annotations (None removes a key; no annotations left, no member)."""
    annotations = dict(metadata.get("annotations") or {})
    for key, value in notes.items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    updated = {k: v for k, v in metadata.items() if k != "annotations"}
    if annotations:
        updated["annotations"] = annotations
    return updated


def _retry_after(exc: BaseException) -> float | None:
    if isinstance(exc, ApiException) and exc.headers:
        value = exc.headers.get("Retry-After")
        if value and str(value).isdigit():
            return float(value)
    return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


__all__ = ["InventorySource", "PublisherOptions", "SameNameConflict", "SlicePublisher"]
