"""The node daemon: one DriverPlugin per backend, metrics, signal handling.

Each driver is started and stopped on its own: a backend that fails to
discover or to bind its sockets is logged and left out, the others keep
serving. SIGTERM/SIGINT stop every driver cleanly (own sockets removed).

Start-up is ordered for the kubelet: every driver serves its sockets
(registration last) while its checkpoint recovery runs in the background
(claim calls wait for it), the daemon gives that recovery a bounded head start,
then loads its metrics and connects to the API server
(`connect`: importing and building the kubernetes client takes longer than
everything before it) and only then attaches the slice publishers and the
claim cache. A prepare that arrives in that gap waits for the client
(PendingClaims) instead of failing: the kubelet backs a pod off for about 40 s
after a failed prepare, while the wait is a few hundred milliseconds.
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dra_driver.common.errors import DraError
from dra_driver.common.logs import fields
from dra_driver.node.device_metrics import DEFAULT_INTERVAL_S, DaemonState, DeviceMetricsCollector, DriverSource, identity_of
from dra_driver.node.metrics import Metrics
from dra_driver.node.plugin.health import Health
from dra_driver.node.metrics_http import BindAddress, HttpEndpoint, Response
from dra_driver.model.device import Inventory
from dra_driver.node.checks.coexistence import DevicePluginGuard
from dra_driver.node.checks.same_name import ConflictBoard, conflict_message, same_name_registrations
from dra_driver.node.plugin.driver import DriverPlugin, PluginSettings, Publisher
from dra_driver.node.plugin.pending_claims import PendingClaims
from dra_driver.node.plugin.prepare import ClaimSource
from dra_driver.node.readiness import MAX_AGE_S, ReadinessMonitor, status_path
from dra_driver.backend.interface import VendorBackend

if TYPE_CHECKING:  # the claim cache imports the kubernetes client, which `connect` loads later
    from dra_driver.kube.claim_cache import ClaimCache

log = logging.getLogger(__name__)

RECOVERY_HEAD_START_S = 5.0  # longest wait for the drivers' recovery before loading metrics and the API client
# How often each driver looks again for a same-name driver's registration and re-verifies its instance lock: a
# conflict that is gone stops refusing claims within this time, without a restart.
RECHECK_INTERVAL_S = 10.0

# Builds the slice publisher of one driver (wired by the publisher module); None = do not publish.
PublisherFactory = Callable[[VendorBackend, Inventory], "Publisher | None"]


@dataclass
class ApiWiring:
    """Everything that needs the API server, built by `Daemon(connect=...)` once the sockets serve."""

    claims: ClaimSource
    publisher_factory: PublisherFactory | None = None
    claim_cache: ClaimCache | None = None


@dataclass
class DaemonStatus:
    running: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # driver -> reason


class Daemon:
    def __init__(
        self,
        backends: Sequence[VendorBackend],
        claims: ClaimSource | None,
        settings: PluginSettings,
        publisher_factory: PublisherFactory | None = None,
        claim_cache: ClaimCache | None = None,
        connect: Callable[[], ApiWiring] | None = None,
        metrics_address: BindAddress | None = None,
        guard: DevicePluginGuard | None = None,
        conflicts: ConflictBoard | None = None,
        device_metrics_interval: float = DEFAULT_INTERVAL_S,
        recheck_interval: float = RECHECK_INTERVAL_S,
    ) -> None:
        """Either `claims` (and optionally a publisher factory and claim cache) ready now, or `connect`,
        called once every driver serves, which returns them (`claims` is then None).

        Metrics (and /readyz, /livez) are served on `metrics_address` (None or port 0: off). Device readings are
        collected every `device_metrics_interval` seconds while metrics are served (0: off; the daemon's state
        gauges stay)."""
        if (claims is None) == (connect is None):
            raise ValueError("Daemon needs exactly one of claims and connect")
        self.backends = list(backends)
        self.settings = settings
        self.metrics = Metrics(load=False)  # prometheus_client is loaded once the sockets serve
        self._wiring = ApiWiring(claims, publisher_factory, claim_cache) if claims is not None else None
        self._connect = connect
        self._pending = PendingClaims() if connect is not None else None
        self._metrics_address = metrics_address or BindAddress("127.0.0.1", 0)
        self.plugins: dict[str, DriverPlugin] = {}
        self._inventories: dict[str, Inventory] = {}
        self.status = DaemonStatus()
        self.metrics_endpoint: HttpEndpoint | None = None
        self._api_started = threading.Event()
        state_file = status_path(settings.state_dir, settings.pod_uid) if settings.state_dir is not None else None
        self.readiness = ReadinessMonitor(lambda: self.plugins, self._api_started.is_set, state_file, stand_down=self._stand_down)
        self._stopped = threading.Event()
        self.claim_cache: ClaimCache | None = claim_cache
        self.guard = guard  # device plugins on the node: devices withheld from slices and refused by prepare
        if guard is not None:
            guard.use_metrics(self.metrics)
        self.conflicts = conflicts or ConflictBoard()  # same-name drivers on the node (shared with the publishers)
        self.conflicts.use_metrics(self.metrics)
        state = DaemonState(self._registered, self._ready_by_driver, self._slices, lambda: guard.overlap() if guard is not None else {})
        self.device_metrics = DeviceMetricsCollector(self.metrics.holders, device_metrics_interval, state)
        self.metrics.add_collector(self.device_metrics)
        self._recheck_interval = recheck_interval
        self._state_problems: dict[str, str] = {}  # driver -> its hold on the state directory is lost
        self._recheck_stop = threading.Event()
        self._recheck_thread: threading.Thread | None = None
        self._stale_seen: set[Path] = set()

    def start(self) -> DaemonStatus:
        """Serve every driver's sockets, then connect to the API server and publish; DraError when connecting fails."""
        claims = self._pending if self._pending is not None else self._claim_source(self._wiring)
        for backend in self.backends:
            self._start_one(backend, claims)
        if not self.plugins:
            # Nothing serves (e.g. the loser of a start race): no metrics port, no readiness status (another instance's
            # pod may share its name), no API client; run_until_signal exits 1 at once.
            return self.status
        self._let_recovery_finish()
        self.metrics.load()
        self._serve_metrics()
        if self.metrics_endpoint is not None:  # nobody reads the readings otherwise
            for driver, plugin in self.plugins.items():
                self.device_metrics.add(self._metrics_source(driver, plugin))
            self.device_metrics.start()
        self.readiness.start()  # not ready until the kubelet registered each driver and its slices are out
        if self._stopped.is_set():  # SIGTERM during start-up: stopping, so no client to build nor slices to publish
            return self.status
        if self._connect is not None and self._pending is not None:
            try:
                self._wiring = self._connect()
            except Exception as exc:  # nothing can be prepared: deregister and say why, rather than hang on
                self._pending.fail(f"the API client could not be built: {exc}")
                self.stop()
                raise
            self._pending.ready(self._claim_source(self._wiring))
        self._start_api_users()
        self._api_started.set()
        self._start_rechecks()
        return self.status

    def _let_recovery_finish(self) -> None:
        """Claims of running pods come first: the imports below (metrics, API client) would share the interpreter
        lock with the drivers' start-up recovery, which every claim call waits for. Bounded: a slow recovery
        delays publishing by at most RECOVERY_HEAD_START_S."""
        deadline = time.monotonic() + RECOVERY_HEAD_START_S
        for plugin in self.plugins.values():
            plugin.service.wait_recovered(max(0.0, deadline - time.monotonic()))

    def _serve_metrics(self) -> None:
        if not self._metrics_address.enabled:
            return
        self.metrics_endpoint = HttpEndpoint(
            self._metrics_address, {"/metrics": self.metrics.exposition, "/readyz": self._readyz, "/livez": lambda: Response(200, b"ok\n")}
        ).start()

    def _metrics_source(self, driver: str, plugin: DriverPlugin) -> DriverSource:
        def health() -> dict[str, bool]:
            hub = plugin.hub
            if hub is None:
                return {}
            return {state.device: state.health != Health.UNHEALTHY for state in hub.snapshot()[1]}

        devices = self._inventories[driver].devices
        identity = {device.name: identity_of(device.attributes) for device in devices}
        return DriverSource(driver, self.settings.node_name, plugin.backend, [device.name for device in devices], health, identity)

    def _registered(self) -> dict[str, bool]:
        return {
            driver: plugin.registration.status is not None and plugin.registration.status.registered for driver, plugin in list(self.plugins.items())
        }

    def _ready_by_driver(self) -> dict[str, bool]:
        report = self.readiness.last
        return {driver: report is not None and driver not in report.problems and "daemon" not in report.problems for driver in list(self.plugins)}

    def _slices(self) -> dict[str, tuple[str, int, int]]:
        """Driver -> (pool, slices, publish failures) of the publishers this instance runs (the lease holder's)."""
        found: dict[str, tuple[str, int, int]] = {}
        for driver, plugin in list(self.plugins.items()):
            leased = plugin.publisher
            if leased is None:
                continue
            inner = leased.inner
            pool = str(getattr(inner, "pool_name", self.settings.node_name))
            slices = int(getattr(inner, "slice_count", 0)) if leased.publishing.is_set() else 0
            found[driver] = (pool, slices, int(getattr(inner, "failures", 0)))
        return found

    def _readyz(self) -> Response:
        """The monitor's last check (at most its interval old): a probe flood never dials the sockets. A check
        older than the probe's limit (a hung monitor) is not ready."""
        report = self.readiness.last
        if report is None:
            return Response(503, b"not checked yet\n")
        stale = report.age_problem(MAX_AGE_S, time.monotonic()) if report.ready else None
        if stale is not None:
            return Response(503, f"daemon: {stale}\n".encode())
        return Response(200 if report.ready else 503, f"{report.summary()}\n".encode())

    def _claim_source(self, wiring: ApiWiring | None) -> ClaimSource:
        """With a claim cache (--claim-cache), prepare reads claims from it when safe and GETs otherwise."""
        assert wiring is not None
        self.claim_cache = wiring.claim_cache
        if wiring.claim_cache is None:
            return wiring.claims
        from dra_driver.kube.claim_cache import CachedClaimReader

        return CachedClaimReader(wiring.claims, wiring.claim_cache)

    def _start_api_users(self) -> None:
        assert self._wiring is not None
        if self.claim_cache is not None:
            self.claim_cache.start()
        factory = self._wiring.publisher_factory
        if factory is None:
            return
        for driver, plugin in list(self.plugins.items()):
            self._check_same_name(driver, plugin)
            try:
                publisher = factory(plugin.backend, self._inventories[driver])
            except Exception as exc:
                plugin.stop()
                self._drop(driver, exc)
                continue
            if publisher is None:
                continue
            try:
                plugin.attach_publisher(publisher)  # stops the plugin when it fails
            except Exception as exc:
                self._drop(driver, exc)

    def _drop(self, driver: str, exc: Exception) -> None:
        """A running driver that could not get its publisher is out, as at start; the others continue."""
        self._driver_failed(driver, exc)
        self.plugins.pop(driver, None)
        self.status.running.remove(driver)

    def _start_one(self, backend: VendorBackend, claims: ClaimSource) -> None:
        driver = backend.driver_name
        try:
            inventory = backend.discover()
            if self.guard is not None:
                self.guard.remember(backend.vendor, inventory)
            check = functools.partial(self._refusal, backend.vendor, driver)
            plugin = DriverPlugin(backend, claims, self.settings, self.metrics, None, inventory, device_check=check)
            plugin.start()
        except Exception as exc:  # one vendor's failure must not stop the others
            self._driver_failed(driver, exc)
            return
        self.plugins[driver] = plugin
        self._inventories[driver] = inventory
        self.status.running.append(driver)

    def _refusal(self, vendor: str, driver: str, devices: Sequence[str]) -> str | None:
        """Why a claim's devices must not be prepared now: a same-name driver on the node, a lost state directory,
        or a device plugin's device."""
        reason = self._stand_down(driver)
        if reason is not None:
            return reason
        return self.guard.refusal(vendor, devices) if self.guard is not None else None

    def _stand_down(self, driver: str) -> str | None:
        """Why `driver` refuses every new claim now (and is not ready), or None."""
        return self.conflicts.get(driver) or self._state_problems.get(driver)

    def _poll_guard(self) -> None:
        if self.guard is None:
            return
        try:
            self.guard.poll()
        except Exception as exc:  # a broken kubelet source must not stop the daemon; the next poll tries again
            log.error("device-plugin rescan failed", extra=fields(error=f"{type(exc).__name__}: {exc}"))

    def _check_same_name(self, driver: str, plugin: DriverPlugin) -> None:
        """Registration sockets of another driver with this name: checked once the sockets serve, then every
        recheck interval, so a conflict is cleared (claims served again) once the other driver is gone."""
        conflict = None
        for found in same_name_registrations(self.settings.kubelet_dir, driver, plugin.paths.state_root):
            if not found.answered:
                if found.socket not in self._stale_seen:  # once, not at every recheck
                    self._stale_seen.add(found.socket)
                    log.warning(
                        "registration socket for this driver's name that nobody serves; the kubelet ignores it",
                        extra=fields(driver=driver, socket=str(found.socket)),
                    )
                continue
            what = f"registration socket {found.socket} serving {found.endpoint or 'an unnamed endpoint'}"
            conflict = conflict or conflict_message(driver, self.settings.node_name, what)
        self.conflicts.set(driver, "registration", conflict)

    def _check_state(self, driver: str, plugin: DriverPlugin) -> None:
        problem = plugin.state_problem()
        previous = self._state_problems.get(driver)
        if problem == previous:
            return
        if problem is None:
            self._state_problems.pop(driver, None)
            log.warning("the instance lock holds again; taking new claims", extra=fields(driver=driver))
        else:
            self._state_problems[driver] = problem
            log.error("instance lock lost; refusing new claims", extra=fields(driver=driver, problem=problem))

    def recheck(self) -> None:
        """One round of the periodic checks of every running driver (same-name registrations, instance lock)."""
        for driver, plugin in list(self.plugins.items()):
            if self._recheck_stop.is_set():
                return
            try:
                self._check_state(driver, plugin)
                if self._wiring is not None and self._wiring.publisher_factory is not None:
                    self._check_same_name(driver, plugin)
            except Exception as exc:  # a check must never end the loop; the next round tries again
                log.error("periodic driver check failed", extra=fields(driver=driver, error=f"{type(exc).__name__}: {exc}"))

    def _start_rechecks(self) -> None:
        self._recheck_stop.clear()
        self._recheck_thread = threading.Thread(target=self._run_rechecks, name="recheck", daemon=True)
        self._recheck_thread.start()

    def _run_rechecks(self) -> None:
        while not self._recheck_stop.wait(self._recheck_interval):
            self.recheck()

    def _driver_failed(self, driver: str, exc: Exception) -> None:
        log.error("driver failed to start; other drivers continue", extra=fields(driver=driver, error=f"{type(exc).__name__}: {exc}"))
        self.status.failed[driver] = str(exc)
        self.metrics.errors.labels(driver, "start").inc()

    def stop(self) -> None:
        self._recheck_stop.set()
        if self._recheck_thread is not None:
            self._recheck_thread.join(timeout=10)
            self._recheck_thread = None
        self.readiness.stop()  # first: it must not serve a registration socket that stop removes
        self.device_metrics.stop()
        for plugin in self.plugins.values():
            plugin.stop()
        self.plugins.clear()
        if self._pending is not None:
            self._pending.fail("the driver is stopping")  # a no-op once the client was ready
        if self.claim_cache is not None:
            self.claim_cache.stop()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.stop()
            self.metrics_endpoint = None
        if self.guard is not None:
            self.guard.close()
        self._stopped.set()

    def request_stop(self) -> None:
        self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    def run_until_signal(self) -> int:
        """Serve until SIGTERM/SIGINT; DraError naming each driver's reason when none could start.

        The handlers are in place before start: a SIGTERM during start-up stops the daemon once start
        returns, through the same clean path (sockets, and a simulated backend's scratch dir, removed),
        where the default action would kill it half-way.
        """
        previous = {sig: signal.signal(sig, lambda *_: self.request_stop()) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            if self._stopped.is_set():  # asked to stop before start (dra_driver.cli.run): nothing to start
                return 0
            status = self.start()
            if not status.running:
                log.error("no driver is running", extra=fields(failed=status.failed))
                reasons = "; ".join(f"{driver}: {reason}" for driver, reason in status.failed.items()) or "no backend"
                raise DraError(f"no driver could start: {reasons}")
            while not self._stopped.wait(1.0):
                self._poll_guard()
            log.info("shutting down")
            return 0
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.stop()
