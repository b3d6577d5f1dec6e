"""One driver instance on the node: a backend with its DRA socket, registration socket and health feed.

Start order follows the kubelet contract, after the checks that refuse a
start that cannot work (socket paths too long; another instance on the state
directory, dra_driver.node.plugin.instance_lock): start recovering the checkpoint,
serve the DRA socket (v1, v1beta1, health), and only then create the
registration socket. Recovery goes on in the background: claim calls wait until
it knows every reservation (plugin/recovery.py, RecoveryGate), while the
kubelet can already register the driver. The slice publisher starts after that: the kubelet needs the sockets
to run pods that are already scheduled, while publishing can follow a moment
later (the daemon attaches publishers once its API client is built). Stop runs
the other way round.

The `publisher` seam: the ResourceSlice publisher (dra_driver.node.publisher, wired
by the daemon) is an optional object with start(), stop() and
set_device_health(event); backend health events go both to the kubelet health
stream and to it (it turns them into device taints). A publisher attached
after start first gets the latest event of every device seen so far.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from dra_driver.api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from dra_driver.common.boot_id import DEFAULT_BOOT_ID_PATH
from dra_driver.node.checkpoint import Checkpoint
from dra_driver.common import atomic_file
from dra_driver.common.logs import fields
from dra_driver.node.metrics import Metrics
from dra_driver.model.device import Inventory
from dra_driver.node.checks.same_name import mark_registration, unmark_registration
from dra_driver.node.plugin.health import MAX_STREAMS, HealthHub, HealthServicer, add_health_servicers
from dra_driver.node.plugin.instance_lock import InstanceLock
from dra_driver.node.plugin.lease import LeasedPublisher, Publisher
from dra_driver.node.plugin.prepare import ClaimSource, DeviceCheck, PrepareService
from dra_driver.node.plugin.registration import RegistrationServicer
from dra_driver.node.plugin.servicers import add_dra_servicers
from dra_driver.node.plugin.sockets import PluginPaths, UnixServer
from dra_driver.backend.interface import HealthEvent, VendorBackend

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PluginSettings:
    node_name: str
    kubelet_dir: Path
    cdi_dir: Path
    pod_uid: str | None = None
    # Checkpoint and locks go under <state_dir>/<driver> (run: /var/run/dra-driver); None keeps them beside the socket.
    state_dir: Path | None = None
    boot_id_path: Path = DEFAULT_BOOT_ID_PATH
    prepare_workers: int = 8
    # gRPC threads of the DRA socket for claim calls; the socket gets health_streams more for the
    # health streams (each holds a thread while open), so streams never take a claim call's thread.
    grpc_workers: int = 32
    health_streams: int = MAX_STREAMS
    # Simulated node in a real cluster: makes the host device nodes of a CDI spec before it is written (dra_driver.simulation.node).
    device_nodes: Callable[[dict[str, Any]], None] | None = None
    # The daemon's effective flags, recorded with its instance lock: `doctor` checks the node as this daemon runs it.
    flags: Mapping[str, str] = field(default_factory=dict)


class DriverPlugin:
    def __init__(
        self,
        backend: VendorBackend,
        claims: ClaimSource,
        settings: PluginSettings,
        metrics: Metrics | None = None,
        publisher: Publisher | None = None,
        inventory: Inventory | None = None,
        device_check: DeviceCheck | None = None,
    ) -> None:
        self.backend = backend
        self.driver = backend.driver_name
        state_dir = settings.state_dir.absolute() if settings.state_dir is not None else None
        self.paths = PluginPaths(settings.kubelet_dir.absolute(), self.driver, settings.pod_uid, state_dir)
        self.settings = settings
        # Only the holder of the per-(node, driver) lease publishes (rolling updates run two instances).
        self.publisher = LeasedPublisher(publisher, self.paths.publisher_lease, self.driver) if publisher is not None else None
        self._inventory = inventory
        self._metrics = metrics
        checkpoint = Checkpoint(self.paths.checkpoint, settings.boot_id_path)
        self.service = PrepareService(
            backend,
            claims,
            checkpoint,
            settings.cdi_dir,
            metrics=metrics,
            workers=settings.prepare_workers,
            shared_lock=self.paths.serialize_lock,
            claim_locks=self.paths.claim_locks_dir,
            pools=(settings.node_name,),  # the pool the publisher and the health stream name
            device_nodes=settings.device_nodes,
            device_check=device_check,
        )
        self.hub: HealthHub | None = None
        self._health_lock = threading.Lock()  # publisher attach vs. health events
        self._last_health: dict[str, HealthEvent] = {}  # replayed to a publisher attached later
        self.health: HealthServicer | None = None
        self.registration = RegistrationServicer(self.driver, str(self.paths.dra_socket))
        self._dra_server: UnixServer | None = None
        self._reg_server: UnixServer | None = None
        self._registration_lock = threading.RLock()  # start/stop vs. the readiness monitor serving the socket again
        self._stopping = False
        self._stop_health = threading.Event()
        self._health_thread: threading.Thread | None = None
        self._instance_lock: InstanceLock | None = None

    def start(self) -> None:
        """Start everything, or nothing: a failure half-way stops what was started (slices withdrawn
        by the publisher's stop, DRA socket removed, health thread ended) and re-raises."""
        self._stopping = False
        try:
            self._start()
        except BaseException:
            log.error("driver plugin failed to start; stopping what was started", extra=fields(driver=self.driver))
            if self.publisher is not None:
                self._best_effort(self.publisher.abort)
            self.stop()
            raise

    def _remove_leftover_temps(self) -> None:
        """Temp files of atomic writes a kill -9 interrupted anywhere under the state directory (checkpoint records,
        sharing and MIG ownership records, readiness status, simulated hardware); the CDI directory's are
        recovery's. A temp a live instance is writing is locked and stays (atomic_file.remove_leftovers)."""
        root = self.paths.state_dir if self.paths.state_dir is not None else self.paths.state_root
        for path in atomic_file.remove_leftovers(root):
            log.info("removed a leftover temp file from the state directory", extra=fields(driver=self.driver, path=str(path)))

    def _start(self) -> None:
        self.paths.check_socket_paths()
        self.paths.make_dirs(self.settings.cdi_dir)
        self._instance_lock = InstanceLock.acquire(self.paths.state_root, self.settings.pod_uid, flags=self.settings.flags)
        self._remove_leftover_temps()
        inventory = self._inventory or self.backend.discover()
        self.service.use_inventory(inventory)
        self.hub = HealthHub(self.settings.node_name, [d.name for d in inventory.devices])
        self.service.start_recovery()  # the kubelet can register meanwhile; claim calls wait for it
        health = self.health = HealthServicer(self.hub, max_streams=self.settings.health_streams)

        def register_dra(server: grpc.Server) -> None:
            add_dra_servicers(server, self.service, self._metrics)
            add_health_servicers(server, health)

        workers = self.settings.grpc_workers + self.settings.health_streams
        self._dra_server = UnixServer(self.paths.dra_socket, register_dra, workers, f"dra-{self.driver}")
        self._dra_server.start()
        self._start_health_feed()
        self.serve_registration()
        log.info(
            "driver plugin started",
            extra=fields(
                driver=self.driver,
                devices=len(inventory.devices),
                dra_socket=str(self.paths.dra_socket),
                registration=str(self.paths.registration_socket),
                state=str(self.paths.state_root),
            ),
        )
        if self.publisher is not None:
            self._start_publisher(self.publisher)

    def serve_registration(self) -> None:
        """Create the registration socket (last step of start), or create it again after someone removed it:
        the kubelet then registers this instance anew (GetInfo, NotifyRegistrationStatus)."""
        with self._registration_lock:
            if self._stopping:
                return
            self._stop_registration()
            self.registration.forget()
            server = UnixServer(
                self.paths.registration_socket,
                lambda grpc_server: reg_grpc.add_RegistrationServicer_to_server(self.registration, grpc_server),
                2,
                f"reg-{self.driver}",
            )
            server.start()
            self._reg_server = server
            # Ours, for the same-name check of other instances; best effort (a full disk is logged, never fatal).
            mark_registration(self.paths.state_root, self.paths.registration_socket)

    def state_problem(self) -> str | None:
        """Why this instance must not take new claims because of its hold on the state directory (re-verified
        now: a lock file deleted under it is made again), or None."""
        lock = self._instance_lock
        return lock.check() if lock is not None else None

    @property
    def serving(self) -> bool:
        """Started and not stopping: the DRA socket serves."""
        return self._dra_server is not None and not self._stopping

    def attach_publisher(self, publisher: Publisher) -> None:
        """Publish this driver's slices from now on (after start): a failure stops the whole plugin, as in start."""
        leased = LeasedPublisher(publisher, self.paths.publisher_lease, self.driver)
        self.publisher = leased
        try:
            self._start_publisher(leased)
        except BaseException:
            log.error("slice publisher failed to start; stopping the driver plugin", extra=fields(driver=self.driver))
            self._best_effort(leased.abort)
            self.stop()
            raise

    def _start_publisher(self, publisher: LeasedPublisher) -> None:
        with self._health_lock:  # no event slips between the replay and the first live one
            for event in self._last_health.values():
                publisher.set_device_health(event)
            publisher.start()

    def stop(self) -> None:
        """Deregister first (remove the registration socket), then stop serving; each step best effort."""
        with self._registration_lock:
            self._stopping = True  # the readiness monitor must not serve the registration socket again
        for step in (self._stop_registration, self._stop_publisher, self._stop_health_feed, self._stop_dra):
            self._best_effort(step)
        self.service.close()
        if self._instance_lock is not None:  # last: nothing of this instance touches the state any more
            self._instance_lock.release()
            self._instance_lock = None
        log.info("driver plugin stopped", extra=fields(driver=self.driver))

    def _best_effort(self, step: Callable[[], object]) -> None:
        try:
            step()
        except Exception as exc:
            log.error(
                "stopping driver plugin step failed", extra=fields(driver=self.driver, step=getattr(step, "__name__", str(step)), error=str(exc))
            )

    def _stop_registration(self) -> None:
        with self._registration_lock:
            if self._reg_server is not None:
                unmark_registration(self.paths.state_root, self.paths.registration_socket)
                self._reg_server.stop()
                self._reg_server = None

    def _stop_publisher(self) -> None:
        if self.publisher is not None:
            self.publisher.stop()

    def _stop_dra(self) -> None:
        if self.hub is not None:
            self.hub.close()  # ends open health streams
        if self._dra_server is not None:
            self._dra_server.stop()
            self._dra_server = None

    # --- health ---------------------------------------------------------------

    def _start_health_feed(self) -> None:
        self._stop_health.clear()
        if type(self.backend).watch_health is VendorBackend.watch_health:
            # No health source at all (the ABC default): nothing to watch, devices stay as discovered.
            return
        self._health_thread = threading.Thread(target=self._health_loop, name=f"health-{self.driver}", daemon=True)
        self._health_thread.start()

    def _stop_health_feed(self) -> None:
        self._stop_health.set()
        if self._health_thread is not None:
            self._health_thread.join(timeout=5)
            self._health_thread = None

    def _health_loop(self) -> None:
        """Feed backend events to the hub; a source that dies before stop turns every device UNKNOWN."""
        try:
            for event in self.backend.watch_health(self._stop_health):
                self.on_health_event(event)
                if self._stop_health.is_set():
                    return
        except Exception as exc:  # a broken health source must not stop claim handling
            self._health_source_lost(f"health watch failed: {type(exc).__name__}: {exc}")
            return
        if not self._stop_health.is_set():
            self._health_source_lost("health watch ended unexpectedly")

    def _health_source_lost(self, reason: str) -> None:
        assert self.hub is not None
        if self.hub.source_lost(reason):
            log.warning(
                "device health source lost; reporting all devices Unknown",
                extra=fields(driver=self.driver, reason=reason),
            )

    def on_health_event(self, event: HealthEvent) -> None:
        """Route one backend health event to the kubelet stream and the publisher seam."""
        assert self.hub is not None
        changed = self.hub.update(event.device, event.healthy, event.reason)
        if changed:
            log.warning(
                "device health changed",
                extra=fields(driver=self.driver, device=event.device, healthy=event.healthy, reason=event.reason),
            )
        with self._health_lock:
            self._last_health[event.device] = event
            if self.publisher is None:
                return
            try:
                self.publisher.set_device_health(event)
            except Exception as exc:
                log.error("publisher rejected health event", extra=fields(driver=self.driver, device=event.device, error=str(exc)))
