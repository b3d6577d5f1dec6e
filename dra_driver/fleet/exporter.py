"""`dra-driver fleet-exporter`'s library: the cluster's DRA state as Prometheus metrics (dra_fleet_*).

Four reflectors (dra_driver/kube/reflector.py: one LIST, then one WATCH each, resumed on resourceVersion,
re-listed on 410 Gone) keep ResourceSlices, ResourceClaims, DeviceClasses and Nodes in memory, trimmed to
what is read. A change marks the picture dirty; a refresh thread rebuilds it at most every `min_interval`
seconds with the code `dra-driver fleet` uses (fleet/build.py: device states, holders, shared capacity)
and explain's engine (explain/pending.py: why each unallocated claim waits). Scrapes render the last
picture and never wait for a refresh; the age of a pending claim is computed at scrape time.

Which nodes run a driver, and what "stale" and "missing" mean (dra_fleet_node_slices):
- published: the node's pool of the driver has every slice of its newest generation;
- stale: the pool is there but not whole: slices of an older generation remain beside the newest, fewer
  slices of the newest generation exist than its resourceSliceCount says, or the pool is invalid (a device
  twice, a counter set twice). A publisher does this for a moment during an update; for minutes it means
  the publisher stopped half-way or two writers fight;
- missing: the exporter saw the driver's slices for the node since it started, the Node still exists, and
  no slice of that driver names it any more (the plugin died or was removed and its slices were deleted).
  A node that lost its slices before the exporter started is not known to run the driver (docs/metrics.md).
A node whose Node object is deleted is forgotten.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dra_driver.allocator import CelMatcher, DeviceClassSpec, DeviceID, SelectorRuntimeError, build_pools
from dra_driver.allocator.types import Node, Pool
from dra_driver.common.logs import fields
from dra_driver.sources.fleet_source import fleet_nodes
from dra_driver.explain.pending import DEFAULT_LIMIT, PendingClaim, cluster_classes, pending_claims
from dra_driver.fleet.build import Filters, build_view
from dra_driver.fleet.model import NO_NODE, DeviceRow
from dra_driver.kube.client import JsonApi
from dra_driver.kube.reflector import Keep, Reflector
from dra_driver.model import quantity
from dra_driver.sources.fleet import Fleet

log = logging.getLogger(__name__)

RESOURCE_PATHS = {
    "resourceslices": "/apis/resource.k8s.io/v1/resourceslices",
    "resourceclaims": "/apis/resource.k8s.io/v1/resourceclaims",
    "deviceclasses": "/apis/resource.k8s.io/v1/deviceclasses",
    "nodes": "/api/v1/nodes",
}
DEVICE_STATES = ("total", "allocated", "free", "tainted")
DEFAULT_MIN_INTERVAL_S = 5.0
NO_CLASS = ""  # device_class of a device no DeviceClass selects


# ---- what each reflector keeps -------------------------------------------------------------


def _kept_whole(kind: str) -> Keep:
    """The object less its managedFields; a LIST's items carry no kind, which the readers of fleet objects want."""

    def keep(obj: dict[str, Any]) -> dict[str, Any]:
        meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
        return {**obj, "kind": kind, "metadata": meta}

    return keep


def _claim_kept(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    kept_meta = {k: meta[k] for k in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp") if k in meta}
    kept_status = {k: status[k] for k in ("allocation", "reservedFor") if isinstance(status, dict) and k in status}
    return {"kind": "ResourceClaim", "metadata": kept_meta, "spec": obj.get("spec") or {}, "status": kept_status}


def _node_kept(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {"metadata": {"name": meta.get("name"), "labels": dict(meta.get("labels") or {})}}


KEEP: dict[str, Keep] = {
    "resourceslices": _kept_whole("ResourceSlice"),
    "resourceclaims": _claim_kept,
    "deviceclasses": _kept_whole("DeviceClass"),
    "nodes": _node_kept,
}


# ---- the picture ---------------------------------------------------------------------------


@dataclass
class Picture:
    """What the metrics show, built by `picture()` from the objects; plain data, rendered at scrape time."""

    devices: dict[tuple[str, str, str, str, str], int] = field(default_factory=dict)  # (node, pool, driver, class, state)
    capacity: dict[tuple[str, str, str, str, str], float] = field(default_factory=dict)  # (node, driver, class, capacity, state)
    pending: list[PendingClaim] = field(default_factory=list)
    node_slices: dict[tuple[str, str], str] = field(default_factory=dict)  # (node, driver) -> published | stale | missing
    invalid_classes: int = 0


def class_members(
    pools: Sequence[Pool], classes: Mapping[str, DeviceClassSpec], matcher: CelMatcher, cache: MembersCache | None = None
) -> dict[DeviceID, list[str]]:
    """Device -> the classes whose selectors all match it (the scheduler's rule); a CEL error is no match.

    `cache` keeps each pool's answer under its slices' names and resourceVersions and the classes'
    (`pool_key`), so a rebuild after a claim event evaluates no selector again."""
    out: dict[DeviceID, list[str]] = {}
    fresh: dict[Any, dict[DeviceID, list[str]]] = {}
    for pool in pools:
        key = cache.pool_key(pool) if cache is not None else None
        known = cache.pools.get(key) if cache is not None else None
        if known is None:
            known = {device.id: _matching(device, classes, matcher) for device in pool.devices}
        fresh[key] = known
        out.update(known)
    if cache is not None:
        cache.pools = fresh  # pools gone or changed drop out
    return out


def _matching(device: Any, classes: Mapping[str, DeviceClassSpec], matcher: CelMatcher) -> list[str]:
    names = []
    for name, spec in classes.items():
        try:
            if all(matcher.evaluate(expression, device) for expression in spec.selectors):
                names.append(name)
        except SelectorRuntimeError:
            continue
    return names


@dataclass
class MembersCache:
    """Class membership per pool, valid while its slices and the classes keep their resourceVersions."""

    versions: dict[str, str] = field(default_factory=dict)  # slice name -> resourceVersion (this rebuild's)
    classes: tuple[tuple[str, str], ...] = ()
    pools: dict[Any, dict[DeviceID, list[str]]] = field(default_factory=dict)

    def prepare(self, slices: Sequence[Mapping[str, Any]], class_docs: Sequence[Mapping[str, Any]]) -> None:
        self.versions = {str(s["metadata"].get("name")): str(s["metadata"].get("resourceVersion") or "") for s in slices}
        self.classes = tuple(sorted((str(c["metadata"].get("name")), str(c["metadata"].get("resourceVersion") or "")) for c in class_docs))

    def pool_key(self, pool: Pool) -> Any:
        return (pool.driver, pool.name, tuple((name, self.versions.get(name, "")) for name in pool.slices), self.classes)


def _pool_node(pool: Pool) -> str | None:
    return next((t.node_name for t in pool.slice_targets.values() if t.node_name), None)


def node_slice_states(pools: Sequence[Pool], seen: set[tuple[str, str]], nodes: set[str] | None) -> dict[tuple[str, str], str]:
    """(node, driver) -> published | stale | missing; `seen` (updated here) remembers every pair ever published,
    `nodes` the Node objects that exist (None: not known yet, nothing is called missing)."""
    states: dict[tuple[str, str], str] = {}
    for pool in pools:
        node = _pool_node(pool)
        if node is None:
            continue  # network-attached devices belong to no node
        whole = not (pool.stale_slices or pool.incomplete or pool.invalid)
        key = (node, pool.driver)
        states[key] = "stale" if not whole or states.get(key) == "stale" else "published"
    seen.update(states)
    if nodes is not None:
        seen.difference_update({pair for pair in seen if pair[0] not in nodes})
        for pair in seen:
            states.setdefault(pair, "missing")
    return states


def _amount(text: str) -> float:
    return float(quantity.parse(text))


def _add_devices(picture: Picture, rows: Iterable[DeviceRow], members: Mapping[DeviceID, list[str]]) -> None:
    for row in rows:
        for device_class in members.get(DeviceID(row.driver, row.pool, row.device)) or [NO_CLASS]:
            states = ["total"] + ([row.state] if row.state in DEVICE_STATES else [])
            for state in states:
                key = (row.node, row.pool, row.driver, device_class, state)
                picture.devices[key] = picture.devices.get(key, 0) + 1
            for share in row.shared:  # consumable capacity of a device several claims may hold
                for state, text in (("total", share.total), ("used", share.used), ("free", share.left)):
                    ckey = (row.node, row.driver, device_class, share.capacity, state)
                    picture.capacity[ckey] = picture.capacity.get(ckey, 0.0) + _amount(text)


def picture(
    slices: list[dict[str, Any]],
    claims: list[dict[str, Any]],
    class_docs: list[dict[str, Any]],
    node_docs: list[dict[str, Any]] | None,
    seen: set[tuple[str, str]],
    pending_limit: int = DEFAULT_LIMIT,
    members: MembersCache | None = None,
) -> Picture:
    """The metrics' picture of one moment of the cluster (`node_docs` None: the Nodes are not listed yet)."""
    matcher = CelMatcher()
    known_nodes = [Node(str(d["metadata"].get("name")), d["metadata"].get("labels") or {}) for d in node_docs or []]
    fleet = Fleet(slices=slices, claims=claims, classes=class_docs, nodes=known_nodes, cluster=True)
    pools = build_pools(slices)
    classes, invalid = cluster_classes(class_docs, matcher)
    out = Picture(invalid_classes=invalid)
    view = build_view(fleet, Filters(), pools=pools)
    if members is not None:
        members.prepare(slices, class_docs)
    _add_devices(out, view.devices, class_members(pools, classes, matcher, members))
    out.pending = pending_claims(fleet, pools, fleet_nodes(pools, known_nodes), classes, matcher, limit=pending_limit)
    names = {n.name for n in known_nodes} if node_docs is not None else None
    out.node_slices = node_slice_states(pools, seen, names)
    return out


def age_seconds(created: str, now: float) -> float:
    """Seconds since an RFC 3339 creationTimestamp (0 when it is missing or unreadable)."""
    try:
        stamp = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
    return max(0.0, now - stamp)


# ---- the exporter --------------------------------------------------------------------------


class FleetExporter:
    """The reflectors, the refresh thread and a prometheus_client collector rendering the last picture."""

    def __init__(
        self,
        api: JsonApi,
        min_interval: float = DEFAULT_MIN_INTERVAL_S,
        watch_timeout_s: int = 300,
        pending_limit: int = DEFAULT_LIMIT,
        backoff_initial_s: float = 0.5,
    ) -> None:
        self.min_interval = min_interval
        self.pending_limit = pending_limit
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self.reflectors = {
            name: Reflector(
                api, path, KEEP[name], name, watch_timeout_s=watch_timeout_s, backoff_initial_s=backoff_initial_s, on_change=self._dirty.set
            )
            for name, path in RESOURCE_PATHS.items()
        }
        self._seen: set[tuple[str, str]] = set()
        self._members = MembersCache()
        self._picture: Picture | None = None
        self._lock = threading.Lock()  # guards _picture (swapped whole)
        self._thread: threading.Thread | None = None
        self.refreshes = 0
        self.refresh_seconds = 0.0
        self.refresh_errors = 0

    def start(self) -> FleetExporter:
        for reflector in self.reflectors.values():
            reflector.start()
        self._thread = threading.Thread(target=self._run, name="fleet-refresh", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._dirty.set()
        for reflector in self.reflectors.values():
            reflector.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    @property
    def ready(self) -> bool:
        """Every resource listed once and a picture built from them."""
        return self._picture is not None

    def wait_refreshed(self, after: int, timeout: float) -> bool:
        """Block until more than `after` refreshes are done (tests, the bench)."""
        deadline = time.monotonic() + timeout
        while self.refreshes <= after:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait()
            if self._stop.is_set():
                return
            if not all(r.synced for r in self.reflectors.values()):
                self._stop.wait(0.05)  # the first lists are still running
                continue
            self._dirty.clear()
            self.refresh()
            self._stop.wait(self.min_interval)  # changes in the meantime set _dirty again: one refresh for all

    def refresh(self) -> None:
        start = time.perf_counter()
        items = {name: reflector.items() for name, reflector in self.reflectors.items()}
        try:
            built = picture(
                items["resourceslices"],
                items["resourceclaims"],
                items["deviceclasses"],
                items["nodes"],
                self._seen,
                self.pending_limit,
                self._members,
            )
        except Exception as exc:  # a picture that cannot be built keeps the last one; the next change tries again
            self.refresh_errors += 1
            log.warning("fleet picture not rebuilt", extra=fields(error=f"{type(exc).__name__}: {exc}"))
            return
        with self._lock:
            self._picture = built
        self.refresh_seconds = time.perf_counter() - start
        self.refreshes += 1

    # ---- rendering (prometheus_client custom collector) ---------------------------

    def collect(self) -> Iterator[Any]:
        from dra_driver.common.prometheus import CounterMetricFamily, GaugeMetricFamily

        with self._lock:
            shown = self._picture
        devices = GaugeMetricFamily(
            "dra_fleet_devices",
            "Devices per node, pool, driver and DeviceClass that selects them, by state (total, allocated, free, tainted)",
            labels=["node", "pool", "driver", "device_class", "state"],
        )
        capacity = GaugeMetricFamily(
            "dra_fleet_capacity",
            "Consumable capacity of devices several claims may share, in the capacity's base unit (total, used, free)",
            labels=["node", "driver", "device_class", "capacity", "state"],
        )
        pending = GaugeMetricFamily(
            "dra_fleet_claims_pending",
            "Unallocated ResourceClaims by namespace and the reason explain's engine gives",
            labels=["namespace", "reason"],
        )
        oldest = GaugeMetricFamily(
            "dra_fleet_claims_pending_oldest_seconds",
            "Age of the oldest unallocated ResourceClaim by namespace and reason",
            labels=["namespace", "reason"],
        )
        nodes = GaugeMetricFamily(
            "dra_fleet_node_slices",
            "1 per node running a driver, by the state of its slices (published, stale, missing)",
            labels=["node", "driver", "state"],
        )
        events = CounterMetricFamily("dra_fleet_watch_events", "Watch events applied, by resource", labels=["resource"])
        lists = CounterMetricFamily("dra_fleet_list_requests", "LIST requests sent (pages included), by resource", labels=["resource"])
        up = GaugeMetricFamily("dra_fleet_up", "1 while the exporter runs")
        refresh = GaugeMetricFamily("dra_fleet_refresh_seconds", "Duration of the last rebuild of the fleet picture")
        up.add_metric([], 1)
        refresh.add_metric([], self.refresh_seconds)
        for name, reflector in self.reflectors.items():
            events.add_metric([name], reflector.events)
            lists.add_metric([name], reflector.list_requests)
        if shown is not None:
            for (node, pool, driver, device_class, state), count in sorted(shown.devices.items()):
                devices.add_metric([_node_label(node), pool, driver, device_class, state], count)
            for (node, driver, device_class, name, state), amount in sorted(shown.capacity.items()):
                capacity.add_metric([_node_label(node), driver, device_class, name, state], amount)
            now = time.time()
            grouped: dict[tuple[str, str], list[float]] = {}
            for claim in shown.pending:
                grouped.setdefault((claim.namespace, claim.reason), []).append(age_seconds(claim.created, now))
            for (namespace, reason), ages in sorted(grouped.items()):
                pending.add_metric([namespace, reason], len(ages))
                oldest.add_metric([namespace, reason], max(ages))
            for (node, driver), state in sorted(shown.node_slices.items()):
                nodes.add_metric([node, driver, state], 1)
        yield from (devices, capacity, pending, oldest, nodes, events, lists, up, refresh)


def _node_label(node: str) -> str:
    """Network-attached devices (no node) carry node="" rather than fleet's "(no node)" text."""
    return "" if node == NO_NODE else node

