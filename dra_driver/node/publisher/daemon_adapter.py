"""Plug SlicePublisher into the node daemon: one publisher per backend, fed by its discovery and health.

The daemon (dra_driver.node.daemon) asks a `PublisherFactory` for the publisher of
each backend and calls start(), stop() and set_device_health(HealthEvent) on
it; this module provides that factory.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable

from dra_driver.common.logs import fields
from dra_driver.kube.client import JsonApi
from dra_driver.model.device import Inventory
from dra_driver.node.checks.coexistence import WITHHELD_ANNOTATION, DevicePluginGuard, withheld_note
from dra_driver.node.checks.same_name import ConflictBoard
from dra_driver.node.publisher.desired import strip_partitioning
from dra_driver.node.publisher.publisher import InventorySource, PublisherOptions, SlicePublisher
from dra_driver.backend.interface import BackendSettings, HealthEvent, Partitioning, VendorBackend

log = logging.getLogger(__name__)


class DaemonPublisher:
    """The daemon's publisher seam over a SlicePublisher."""

    def __init__(self, publisher: SlicePublisher) -> None:
        self.publisher = publisher

    def start(self) -> None:
        self.publisher.start()

    def stop(self) -> None:
        self.publisher.stop()

    def set_device_health(self, event: HealthEvent) -> None:
        self.publisher.apply_health_event(event)

    def synced(self) -> bool:
        """The slices were reconciled with the API server at least once (readiness)."""
        return self.publisher.sync_count > 0

    def withdraw(self) -> int:
        """Delete this (node, driver)'s slices: a driver that failed to start must not advertise devices."""
        return self.publisher.withdraw()


def backend_inventory_source(backend: VendorBackend, first: Inventory | None = None) -> InventorySource:
    """Inventory from the backend; the daemon's initial discovery is used once instead of discovering twice.

    Asked for "static" while the backend runs dynamic partitioning (the API
    server dropped counters), the backend is switched to static partitioning
    so that discovery and prepare agree with what is published.
    """
    cached = [first] if first is not None else []

    def source(partitioning: Partitioning) -> Inventory:
        settings = getattr(backend, "settings", None)
        if isinstance(settings, BackendSettings) and settings.partitioning != partitioning:
            backend.settings = dataclasses.replace(settings, partitioning=partitioning)  # type: ignore[attr-defined]  # the backend's own field, read with getattr above
            cached.clear()
            log.warning("backend switched partitioning mode", extra=fields(vendor=backend.vendor, partitioning=partitioning))
        if cached:
            return cached.pop()
        inventory = backend.discover()
        if partitioning == "static" and inventory.counter_sets:
            # A backend that cannot switch: drop the counters rather than publish nothing.
            log.warning("backend cannot publish static partitions; dropping shared counters", extra=fields(vendor=backend.vendor))
            inventory = strip_partitioning(inventory)
        return inventory

    return source


def _withholding(source: InventorySource, guard: DevicePluginGuard, vendor: str) -> InventorySource:
    return lambda partitioning: guard.filter(vendor, source(partitioning))


def _withheld_notes(guard: DevicePluginGuard, vendor: str) -> dict[str, str | None]:
    return {WITHHELD_ANNOTATION: withheld_note(guard.withheld(vendor))}


def publisher_factory(
    api: JsonApi,
    node_name: str,
    options: PublisherOptions | None = None,
    guard: DevicePluginGuard | None = None,
    conflicts: ConflictBoard | None = None,
) -> Callable[[VendorBackend, Inventory], DaemonPublisher]:
    """What `Daemon(publisher_factory=...)` takes: a publisher per backend, in the backend's partitioning mode.

    With a guard, the devices a device plugin on the node hands out are left out of every inventory
    published, and a change in them (a device plugin started or stopped) republishes."""
    base = options or PublisherOptions()

    def build(backend: VendorBackend, inventory: Inventory) -> DaemonPublisher:
        settings = getattr(backend, "settings", None)
        partitioning: Partitioning = settings.partitioning if isinstance(settings, BackendSettings) else base.partitioning
        source = backend_inventory_source(backend, inventory)
        notes = None
        if guard is not None:
            source = _withholding(source, guard, backend.vendor)
            notes = functools.partial(_withheld_notes, guard, backend.vendor)
        options = dataclasses.replace(base, partitioning=partitioning)
        publisher = SlicePublisher(api, node_name, backend.driver_name, source, options, conflicts=conflicts, notes=notes)
        if guard is not None:
            guard.subscribe(backend.vendor, publisher.refresh_inventory)
        return DaemonPublisher(publisher)

    return build
