"""The node daemon: one DriverPlugin per backend, metrics, signal handling.

Each driver is started and stopped on its own: a backend that fails to
discover or to bind its sockets is logged and left out, the others keep
serving. SIGTERM/SIGINT stop every driver cleanly (own sockets removed).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.kube.claim_cache import CachedClaimReader, ClaimCache
from dra_driver.logs import fields
from dra_driver.metrics import Metrics
from dra_driver.model.device import Inventory
from dra_driver.plugin.driver import DriverPlugin, PluginSettings, Publisher
from dra_driver.plugin.prepare import ClaimSource
from dra_driver.vendor import VendorBackend

log = logging.getLogger(__name__)

# Builds the slice publisher of one driver (wired by the publisher module); None = do not publish.
PublisherFactory = Callable[[VendorBackend, Inventory], "Publisher | None"]


@dataclass
class DaemonStatus:
    running: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # driver -> reason


class Daemon:
    def __init__(
        self,
        backends: Sequence[VendorBackend],
        claims: ClaimSource,
        settings: PluginSettings,
        metrics_port: int = 0,
        publisher_factory: PublisherFactory | None = None,
        claim_cache: ClaimCache | None = None,
    ) -> None:
        self.backends = list(backends)
        self.settings = settings
        self.metrics = Metrics()
        # With a claim cache (--claim-cache), prepare reads claims from it when safe and GETs otherwise.
        self.claim_cache = claim_cache
        if claim_cache is not None:
            claims = CachedClaimReader(claims, claim_cache)
        self._claims = claims
        self._metrics_port = metrics_port
        self._publisher_factory = publisher_factory
        self.plugins: dict[str, DriverPlugin] = {}
        self.status = DaemonStatus()
        self._metrics_server: Any = None
        self._stopped = threading.Event()

    def start(self) -> DaemonStatus:
        self._metrics_server = self.metrics.serve(self._metrics_port)
        if self.claim_cache is not None:
            self.claim_cache.start()
        for backend in self.backends:
            self._start_one(backend)
        return self.status

    def _start_one(self, backend: VendorBackend) -> None:
        driver = backend.driver_name
        try:
            inventory = backend.discover()
            publisher = self._publisher_factory(backend, inventory) if self._publisher_factory else None
            plugin = DriverPlugin(backend, self._claims, self.settings, self.metrics, publisher, inventory)
            plugin.start()
        except Exception as exc:  # one vendor's failure must not stop the others
            log.error("driver failed to start; other drivers continue", extra=fields(driver=driver, error=f"{type(exc).__name__}: {exc}"))
            self.status.failed[driver] = str(exc)
            self.metrics.errors.labels(driver, "start").inc()
            return
        self.plugins[driver] = plugin
        self.status.running.append(driver)

    def stop(self) -> None:
        for plugin in self.plugins.values():
            plugin.stop()
        self.plugins.clear()
        if self.claim_cache is not None:
            self.claim_cache.stop()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server = None
        self._stopped.set()

    def request_stop(self) -> None:
        self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    def run_until_signal(self) -> int:
        """Serve until SIGTERM/SIGINT; exit code 1 when no driver could start."""
        status = self.start()
        if not status.running:
            log.error("no driver is running", extra=fields(failed=status.failed))
            self.stop()
            return 1
        previous = {sig: signal.signal(sig, lambda *_: self.request_stop()) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            while not self._stopped.wait(1.0):
                pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            log.info("shutting down")
            self.stop()
        return 0
