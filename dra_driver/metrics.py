"""Prometheus metrics of the kubelet plugin.

Each daemon owns its own CollectorRegistry (not the process-global one) so
several daemons in one process (tests, demo) do not collide.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from dra_driver.errors import DraError
from dra_driver.logs import fields

log = logging.getLogger(__name__)

# Prepare is expected to take a few ms (finer buckets around its 2 ms target, so histogram_quantile can tell
# 1.5 from 2.5 ms); the tail buckets catch slow backends (MIG creation).
_BUCKETS = (0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 45.0)


class MetricsPortError(DraError):
    """The --metrics-port cannot be bound (in use, or not permitted)."""


class _Family:
    """A labelled metric whose children are looked up once: `labels()` of prometheus_client
    validates and hashes on every call, which showed up at a few percent of a prepare's CPU."""

    def __init__(self, metric: Any) -> None:
        self.metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def labels(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            child = self._children.setdefault(values, self.metric.labels(*values))
        return child


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.requests = _Family(
            Counter(
                "dra_driver_requests",
                "gRPC requests served, by driver, method and result (ok or error)",
                ["driver", "method", "result"],
                registry=self.registry,
            )
        )
        self.claims = _Family(
            Counter(
                "dra_driver_claims",
                "Claims handled inside prepare/unprepare requests, by result",
                ["driver", "operation", "result"],
                registry=self.registry,
            )
        )
        self.latency = _Family(
            Histogram(
                "dra_driver_request_duration_seconds",
                "gRPC request latency by driver and method",
                ["driver", "method"],
                buckets=_BUCKETS,
                registry=self.registry,
            )
        )
        self.prepared_devices = _Family(
            Gauge(
                "dra_driver_prepared_devices",
                "Devices currently prepared for claims",
                ["driver"],
                registry=self.registry,
            )
        )
        self.state_damage = _Family(
            Counter(
                "dra_driver_state_damage",
                "Damaged or lost plugin state found (kind: record, checkpoint-dir, cdi-spec, rollback-failed) "
                "and claims rebuilt from evidence (kind: rebuilt)",
                ["driver", "kind"],
                registry=self.registry,
            )
        )
        self.errors = _Family(
            Counter(
                "dra_driver_errors",
                "Errors by driver and operation (claim failures, backend failures, server failures)",
                ["driver", "operation"],
                registry=self.registry,
            )
        )

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

    def serve(self, port: int, address: str = "0.0.0.0") -> Any:
        """Expose /metrics on the port (0 = off); returns the server or None."""
        if port <= 0:
            return None
        try:
            server, _thread = start_http_server(port, addr=address, registry=self.registry)
        except OSError as exc:
            raise MetricsPortError(f"cannot serve metrics on {address}:{port} (--metrics-port): {exc.strerror or exc}; choose a free port or 0 to turn metrics off") from exc
        log.info("serving metrics", extra=fields(port=port))
        return server
