"""Prometheus metrics of the kubelet plugin.

Each daemon owns its own CollectorRegistry (not the process-global one) so
several daemons in one process (tests, demo) do not collide.

prometheus_client is imported by load(), not by this module: it costs a
sizeable part of the daemon's start-up, which the kubelet waits for (and only
its metric types, through dra_driver.common.prometheus; /metrics is written by
dra_driver.common.prometheus_text). The daemon creates Metrics(load=False) and loads them once its
sockets serve; what is counted before that is kept and replayed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dra_driver.node.metrics_http import Response

log = logging.getLogger(__name__)

# Prepare is expected to take a few ms (finer buckets around its 2 ms target, so histogram_quantile can tell
# 1.5 from 2.5 ms); the tail buckets catch slow backends (MIG creation).
_BUCKETS = (0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 45.0)


class _Recorder:
    """A labelled child used before its family is loaded: its calls are kept and replayed on load."""

    def __init__(self, family: _Family, values: tuple[str, ...]) -> None:
        self._family = family
        self._values = values

    def _call(self, method: str, value: float) -> None:
        self._family.record(self._values, method, value)

    def inc(self, amount: float = 1.0) -> None:
        self._call("inc", amount)

    def set(self, value: float) -> None:
        self._call("set", value)

    def observe(self, value: float) -> None:
        self._call("observe", value)


class _Family:
    """A labelled metric whose children are looked up once: `labels()` of prometheus_client
    validates and hashes on every call, which showed up at a few percent of a prepare's CPU."""

    def __init__(self, build: Callable[[Any], Any]) -> None:
        self._build = build  # registry -> the prometheus_client metric
        self.metric: Any = None
        self._children: dict[tuple[str, ...], Any] = {}
        self._pending: list[tuple[tuple[str, ...], str, float]] = []
        self._lock = threading.Lock()  # only taken before load and by load itself

    def load(self, registry: Any) -> None:
        with self._lock:
            self.metric = self._build(registry)
            self._children = {values: self.metric.labels(*values) for values in self._children}
            for values, method, value in self._pending:
                getattr(self._children[values], method)(value)
            self._pending.clear()

    def record(self, values: tuple[str, ...], method: str, value: float) -> None:
        with self._lock:
            if self.metric is None:
                self._pending.append((values, method, value))
                return
        getattr(self.labels(*values), method)(value)  # loaded meanwhile: straight to the real child

    def labels(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            with self._lock:
                made = self.metric.labels(*values) if self.metric is not None else _Recorder(self, values)
                child = self._children.setdefault(values, made)
        return child


@dataclass(frozen=True)
class HeldClaim:
    """A prepared claim as the holder metrics need it: identity and the (pool, device) of each result."""

    uid: str
    namespace: str
    name: str
    devices: Sequence[tuple[str, str]]


@dataclass
class HolderView:
    """A copy of who holds one driver's devices: (pool, device) -> [(namespace, claim)], claim UID -> (namespace, claim),
    (namespace, claim) -> pods."""

    devices: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)
    claims: dict[str, tuple[str, str]] = field(default_factory=dict)
    pods: dict[tuple[str, str], list[str]] = field(default_factory=dict)


class DeviceHolders:
    """Who holds which device: `dra_driver_device_claim` (one series per prepared device and claim) and
    `dra_driver_claim_pod` (one per pod in the claim's status.reservedFor, where prepare read the claim).

    Labels are names, never UIDs, and a claim's series go when it is unprepared, so the number of
    series stays bounded by what the node holds now. Claims are keyed by UID inside, so a claim
    deleted and re-created under the same name never leaves the old series behind.
    """

    def __init__(self) -> None:
        # The gauges come with load() (see Metrics); until then the series are only kept here.
        self._devices: Any = None
        self._pods: Any = None
        self._lock = threading.Lock()
        self._device_series: dict[tuple[str, str], dict[tuple[str, ...], int]] = {}  # (driver, uid) -> label values -> value
        self._pod_series: dict[tuple[str, str], dict[tuple[str, ...], int]] = {}
        self._pods_seen: dict[tuple[str, str], tuple[str, ...]] = {}  # from the claim GET, until the claim settles

    def load(self, registry: Any) -> None:
        """Create the gauges and publish every series kept so far."""
        prometheus = _prometheus()
        with self._lock:
            self._devices = prometheus.Gauge(
                "dra_driver_device_claim",
                "Prepared device held by a claim (value: allocation results of the claim on that device, usually 1)",
                ["driver", "pool", "device", "namespace", "claim"],
                registry=registry,
            )
            self._pods = prometheus.Gauge(
                "dra_driver_claim_pod",
                "Pod a prepared claim is reserved for (status.reservedFor when prepare read the claim); value 1",
                ["driver", "namespace", "claim", "pod"],
                registry=registry,
            )
            for gauge, series in ((self._devices, self._device_series), (self._pods, self._pod_series)):
                for values in series.values():
                    for labels, value in values.items():
                        gauge.labels(*labels).set(value)

    def note_pods(self, driver: str, uid: str, pods: Sequence[str]) -> None:
        """Remember the claim's pods; they are published once the claim is prepared (see `update`)."""
        with self._lock:
            self._pods_seen[(driver, uid)] = tuple(sorted(set(pods)))

    def update(self, driver: str, uid: str, held: HeldClaim | None) -> None:
        """Publish a prepared claim's series, or (None: unprepared, failed, rolled back) remove them."""
        with self._lock:
            self._set(driver, uid, held)

    def sync(self, driver: str, held: Iterable[HeldClaim]) -> None:
        """Publish exactly these claims for `driver` (start-up recovery: the checkpoint is the truth)."""
        wanted = {claim.uid: claim for claim in held}
        with self._lock:
            for key in [k for k in self._device_series if k[0] == driver and k[1] not in wanted]:
                self._set(driver, key[1], None)
            for uid, claim in wanted.items():
                self._set(driver, uid, claim)

    def holders_of(self, driver: str) -> HolderView:
        """Who holds `driver`'s devices now, for the device metrics (a copy: the caller reads it without the lock)."""
        view = HolderView()
        with self._lock:
            for (holder_driver, uid), series in self._device_series.items():
                if holder_driver != driver:
                    continue
                for _, pool, device, namespace, claim in series:
                    view.devices.setdefault((pool, device), []).append((namespace, claim))
                    view.claims[uid] = (namespace, claim)
            for (holder_driver, _), series in self._pod_series.items():
                if holder_driver == driver:
                    for _, namespace, claim, pod in series:
                        view.pods.setdefault((namespace, claim), []).append(pod)
        return view

    def _set(self, driver: str, uid: str, held: HeldClaim | None) -> None:
        key = (driver, uid)
        pods = self._pods_seen.pop(key, None)
        if held is None:
            devices: dict[tuple[str, ...], int] = {}
            pod_labels: set[tuple[str, ...]] = set()
        else:
            devices = dict(Tally((driver, pool, device, held.namespace, held.name) for pool, device in held.devices))
            pod_labels = {(driver, held.namespace, held.name, pod) for pod in pods} if pods is not None else set(self._pod_series.get(key, {}))
        self._replace(self._devices, self._device_series, key, devices)
        self._replace(self._pods, self._pod_series, key, dict.fromkeys(pod_labels, 1))

    @staticmethod
    def _replace(
        gauge: Any, series: dict[tuple[str, str], dict[tuple[str, ...], int]], key: tuple[str, str], values: dict[tuple[str, ...], int]
    ) -> None:
        """Record the claim's series; with the gauge loaded (None before), publish the change too."""
        if gauge is not None:
            for gone in set(series.get(key, {})) - set(values):
                # A claim re-created under the same name (new UID) may still hold the same series.
                if not any(gone in other for k, other in series.items() if k != key):
                    gauge.remove(*gone)
            for labels, value in values.items():
                gauge.labels(*labels).set(value)
        if values:
            series[key] = dict(values)
        else:
            series.pop(key, None)


class Metrics:
    def __init__(self, registry: Any = None, load: bool = True) -> None:
        """`load=False` defers importing prometheus_client to load() (the daemon: after its sockets serve)."""
        self.registry = registry
        self._loaded = False
        self.holders = DeviceHolders()
        self._collectors: list[Any] = []  # custom prometheus_client collectors (device metrics), registered on load
        self.requests = _Family(
            lambda registry: _prometheus().Counter(
                "dra_driver_requests",
                "gRPC requests served, by driver, method and result (ok or error)",
                ["driver", "method", "result"],
                registry=registry,
            )
        )
        self.claims = _Family(
            lambda registry: _prometheus().Counter(
                "dra_driver_claims",
                "Claims handled inside prepare/unprepare requests, by result",
                ["driver", "operation", "result"],
                registry=registry,
            )
        )
        self.latency = _Family(
            lambda registry: _prometheus().Histogram(
                "dra_driver_request_duration_seconds",
                "gRPC request latency by driver and method",
                ["driver", "method"],
                buckets=_BUCKETS,
                registry=registry,
            )
        )
        self.prepared_devices = _Family(
            lambda registry: _prometheus().Gauge(
                "dra_driver_prepared_devices",
                "Devices currently prepared for claims",
                ["driver"],
                registry=registry,
            )
        )
        self.state_damage = _Family(
            lambda registry: _prometheus().Counter(
                "dra_driver_state_damage",
                "Damaged or lost plugin state found (kind: record, checkpoint-dir, cdi-spec, rollback-failed) "
                "and claims rebuilt from evidence (kind: rebuilt)",
                ["driver", "kind"],
                registry=registry,
            )
        )
        self.withheld_devices = _Family(
            lambda registry: _prometheus().Gauge(
                "dra_driver_withheld_devices",
                "Devices left out of the slices because a device plugin on the node hands them out (docs/coexistence.md)",
                ["driver"],
                registry=registry,
            )
        )
        self.errors = _Family(
            lambda registry: _prometheus().Counter(
                "dra_driver_errors",
                "Errors by driver and operation (claim failures, backend failures, server failures)",
                ["driver", "operation"],
                registry=registry,
            )
        )
        if load:
            self.load()

    def load(self) -> None:
        """Create the prometheus_client metrics (once) and replay what was counted before."""
        if self._loaded:
            return
        self._loaded = True
        if self.registry is None:
            self.registry = _prometheus().CollectorRegistry()
        # Every family declared above, so a new one cannot be left unloaded (its counts would be lost).
        for family in [value for value in vars(self).values() if isinstance(value, _Family)]:
            family.load(self.registry)
        self.holders.load(self.registry)
        for collector in self._collectors:
            self.registry.register(collector)

    def add_collector(self, collector: Any) -> None:
        """A prometheus_client collector (an object with collect()) read at every scrape; registered now or on load."""
        self._collectors.append(collector)
        if self._loaded:
            self.registry.register(collector)

    @contextmanager
    def timed(self, driver: str, method: str) -> Iterator[None]:
        """Count and time one request; an exception counts as result=error."""
        start = time.perf_counter()
        result = "error"
        try:
            yield
            result = "ok"
        finally:
            self.latency.labels(driver, method).observe(time.perf_counter() - start)
            self.requests.labels(driver, method, result).inc()

    def exposition(self) -> Response:
        """The Prometheus text format of every series (the /metrics answer of dra_driver.node.metrics_http)."""
        self.load()
        from dra_driver.common.prometheus_text import CONTENT_TYPE, generate_text

        return Response(200, generate_text(self.registry), CONTENT_TYPE)


def _prometheus() -> Any:
    """prometheus_client's metric types and registry, imported on first use (dra_driver.common.prometheus)."""
    import dra_driver.common.prometheus as prometheus

    return prometheus
