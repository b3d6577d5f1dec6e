"""Devices a device plugin on the same node offers: withheld from the slices, refused by prepare.

Device-plugin device IDs are matched against each device's identities: its name, `uuid` (NVIDIA GPU and MIG
UUIDs, which the NVIDIA device plugin uses as IDs; time-sliced replicas `<uuid>::<n>` count as the UUID),
PCI bus ID (normalised: any domain width, lower case) and `serial`. A match also covers the device's
partitions (`parentUUID`/`parentPciBusID`) and, for a partition, its parent GPU: one physical GPU is never
split between the two.

Default (exclusive): every device a device plugin of the driver's vendor advertises is withheld; when the
plugin does not say which (only its socket or the Node's count is visible) or names IDs that match none of
this driver's devices, every device of the vendor is withheld. `--offer-devices` names the devices this
driver offers anyway (a deliberate split); a device a device-plugin pod holds is withheld and refused
whatever that list says.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dra_driver.common.logs import fields
from dra_driver.node.metrics import Metrics
from dra_driver.model.device import Device, Inventory
from dra_driver.node.checks.device_plugins import DevicePluginReport, VendorPlugins, scan, vendor_of_resource
from dra_driver.node.checks.pod_resources import PodResourcesClient, PodResourcesUnavailable
from dra_driver.backend.vocabulary import PCI_BUS_ID

log = logging.getLogger(__name__)

RESCAN_INTERVAL_S = 30.0
_IDENTITY_ATTRIBUTES = ("uuid", PCI_BUS_ID, "serial")
_PARENT_ATTRIBUTES = ("parentUUID", "parentPciBusID")
_PCI = re.compile(r"^(?:([0-9a-f]{1,8}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")
_REPLICA = re.compile(r"::[0-9]+$")  # NVIDIA time-slicing replica suffix


def normalize_id(text: str) -> str:
    lowered = _REPLICA.sub("", text.strip().lower())
    match = _PCI.match(lowered)
    if match is None:
        return lowered
    domain, bus, slot, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{bus}:{slot}.{function}"


def identities(device: Device) -> set[str]:
    values = {device.name} | {str(device.attributes[a]) for a in _IDENTITY_ATTRIBUTES if a in device.attributes}
    return {normalize_id(v) for v in values if v}


def parent_identities(device: Device) -> set[str]:
    return {normalize_id(str(device.attributes[a])) for a in _PARENT_ATTRIBUTES if a in device.attributes}


def related(inventory: Inventory, ids: Iterable[str]) -> tuple[dict[str, str], set[str]]:
    """(device name -> the ID that covers it, IDs that match no device): matched devices, their partitions, their parents."""
    wanted = {normalize_id(i): i for i in ids}
    covered: dict[str, str] = {}
    unmatched = set(wanted.values())
    # A GPU in MIG mode is published only as its partitions: its UUID is their parent's.
    direct = [(d, wanted[k]) for d in inventory.devices for k in identities(d) | parent_identities(d) if k in wanted]
    for device, device_id in direct:
        unmatched.discard(device_id)
        family = identities(device) | parent_identities(device)
        for other in inventory.devices:
            if other.name == device.name or parent_identities(other) & family or identities(other) & parent_identities(device):
                covered.setdefault(other.name, device_id)
    return covered, unmatched


@dataclass(frozen=True)
class Offer:
    """`--offer-devices`: names, UUIDs or PCI bus IDs of the devices this driver offers beside a device plugin."""

    keys: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str | None) -> Offer:
        return cls(frozenset(normalize_id(part) for part in (text or "").split(",") if part.strip()))

    def includes(self, device: Device) -> bool:
        return bool(self.keys & identities(device))


def withheld_devices(inventory: Inventory, plugins: VendorPlugins | None, offer: Offer) -> dict[str, str]:
    """Device name -> why it is withheld (empty: no device plugin of this vendor on the node)."""
    if plugins is None:
        return {}
    held, _ = related(inventory, (h.device_id for h in plugins.holders))
    holders = {h.device_id: h for h in plugins.holders}
    if plugins.advertised:
        advertised, unmatched = related(inventory, plugins.advertised)
    else:
        advertised, unmatched = {}, {"(unknown)"}
    why = f"offered by the {plugins.describe()}"
    if unmatched:  # which devices it hands out is unknown: none of them is safe to offer
        detail = (
            "does not say which devices" if not plugins.advertised else f"names IDs that match no device here ({', '.join(sorted(unmatched)[:3])})"
        )
        withheld = {d.name: f"{why}, which {detail}" for d in inventory.devices}
    else:
        withheld = {name: f"{why} as {device_id}" for name, device_id in advertised.items()}
    withheld = {name: reason for name, reason in withheld.items() if not offer.includes(inventory.device(name))}
    for name, device_id in held.items():
        withheld[name] = f"held by device-plugin {holders[device_id].describe()}"
    return withheld


def offered_overlap(inventory: Inventory, plugins: VendorPlugins | None, offer: Offer) -> int:
    """Devices a device plugin advertises that this driver still offers (named in --offer-devices): both hand them out."""
    if plugins is None or not plugins.advertised or not offer.keys:
        return 0
    advertised, _ = related(inventory, plugins.advertised)
    return sum(1 for name in advertised if offer.includes(inventory.device(name)))


WITHHELD_ANNOTATION = "dra-driver.io/withheld-devices"
_MAX_NOTE_CHARS = 4096


def withheld_note(withheld: Mapping[str, str]) -> str | None:
    """The pool's annotation: each withheld device and why, bounded (None: nothing withheld, no annotation)."""
    if not withheld:
        return None
    lines = [f"{name}: {reason}" for name, reason in sorted(withheld.items())]
    text = "\n".join(lines)
    if len(text) <= _MAX_NOTE_CHARS:
        return text
    kept: list[str] = []
    for line in lines:
        if sum(len(k) + 1 for k in kept) + len(line) > _MAX_NOTE_CHARS - 40:
            break
        kept.append(line)
    return "\n".join([*kept, f"... and {len(lines) - len(kept)} more"])


@dataclass(frozen=True)
class CoexistenceSettings:
    kubelet_dir: Path
    pod_resources_socket: Path | None
    offer: Offer = field(default_factory=Offer)
    rescan_interval: float = RESCAN_INTERVAL_S


class DevicePluginGuard:
    """One per daemon: the last scan of the node's device plugins, the inventories it filters, change callbacks."""

    def __init__(self, settings: CoexistenceSettings, metrics: Metrics | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._metrics = metrics
        self._clock = clock
        self._lock = threading.Lock()  # the state below; never held across I/O (prepare's refusal takes it)
        self._scanning = threading.Lock()  # one scan at a time, taken before `_lock`, never under it
        self._node: Mapping[str, Any] | None = None
        self._node_generation = 0  # a scan started before the last set_node is not fresh
        self._report: DevicePluginReport | None = None
        self._scanned_at = 0.0
        self._inventories: dict[str, Inventory] = {}  # vendor -> the full inventory last seen
        self._withheld: dict[str, dict[str, str]] = {}  # vendor -> device -> reason
        self._overlap: dict[str, int] = {}  # driver -> devices offered although a device plugin advertises them
        self._listeners: dict[str, list[Callable[[], None]]] = {}
        self._changed: set[str] = set()  # vendors whose withheld devices changed; listeners not told yet
        socket = settings.pod_resources_socket
        self._pod_resources = PodResourcesClient(socket) if socket is not None else None  # the per-prepare List

    def close(self) -> None:
        if self._pod_resources is not None:
            self._pod_resources.close()

    def use_metrics(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def set_node(self, node: Mapping[str, Any] | None) -> None:
        """The Node object (its allocatable names device-plugin resources); read once the API client exists."""
        with self._lock:
            self._node = node
            self._node_generation += 1
            self._scanned_at = 0.0

    def subscribe(self, vendor: str, callback: Callable[[], None]) -> None:
        """`callback` runs when the devices withheld from `vendor` change (the publisher republishes)."""
        with self._lock:
            self._listeners.setdefault(vendor, []).append(callback)

    def report(self) -> DevicePluginReport:
        self._refresh()
        with self._lock:
            return self._current_report()

    def _current_report(self) -> DevicePluginReport:
        return self._report if self._report is not None else DevicePluginReport()

    def _due(self) -> bool:
        return self._report is None or self._clock() - self._scanned_at >= self.settings.rescan_interval

    def _refresh(self) -> None:
        """Rescan when the last scan is due, outside `_lock`: a scan reads the kubelet's files and asks the kubelet
        over gRPC, and a prepare waiting for `_lock` must never wait for that. While another thread scans, the
        last report stands (the first scan is waited for: there is nothing else to answer from)."""
        with self._lock:
            if not self._due():
                return
            first = self._report is None
        if not self._scanning.acquire(blocking=first):
            return
        try:
            with self._lock:
                if not self._due():
                    return
                node, generation = self._node, self._node_generation
            started = self._clock()
            report = scan(self.settings.kubelet_dir, self.settings.pod_resources_socket, node)
            for problem in report.problems:
                log.debug("device-plugin source not readable", extra=fields(problem=problem))
            with self._lock:
                self._report = report
                if generation == self._node_generation:  # else the Node changed meanwhile: scan again next time
                    self._scanned_at = started
        finally:
            self._scanning.release()

    def remember(self, vendor: str, inventory: Inventory) -> None:
        """Keep the vendor's full inventory; nothing is scanned yet (the daemon's start-up is on the kubelet's clock)."""
        with self._lock:
            self._inventories[vendor] = inventory

    def observe(self, vendor: str, inventory: Inventory) -> dict[str, str]:
        """Remember the vendor's full inventory and return what is withheld from it now."""
        self._refresh()
        with self._lock:
            self._inventories[vendor] = inventory
            withheld = self._update(vendor)
        self._notify()
        return withheld

    def filter(self, vendor: str, inventory: Inventory) -> Inventory:
        """The inventory without its withheld devices (what the publisher publishes)."""
        withheld = self.observe(vendor, inventory)
        if not withheld:
            return inventory
        return replace(inventory, devices=[d for d in inventory.devices if d.name not in withheld])

    def _update(self, vendor: str) -> dict[str, str]:
        """Recompute from the last scan (lock held); a change is logged once, counted, and queued for the listeners (see _notify)."""
        inventory = self._inventories.get(vendor)
        if inventory is None:
            return {}
        plugins = self._current_report().for_vendor(vendor)
        withheld = withheld_devices(inventory, plugins, self.settings.offer)
        self._overlap[inventory.driver] = offered_overlap(inventory, plugins, self.settings.offer)
        previous = self._withheld.get(vendor)
        self._withheld[vendor] = withheld
        if previous == withheld:
            return withheld
        if previous is None or previous.keys() != withheld.keys():
            self._log_change(inventory.driver, withheld, bool(previous))
        if self._metrics is not None:
            self._metrics.withheld_devices.labels(inventory.driver).set(len(withheld))
        if previous is not None:  # the first computation is what the publisher asks for anyway
            self._changed.add(vendor)
        return withheld

    @staticmethod
    def _log_change(driver: str, withheld: Mapping[str, str], had_any: bool) -> None:
        if withheld:
            log.warning(
                "devices withheld: a device plugin on this node hands out the same devices (see --offer-devices to split the node)",
                extra=fields(driver=driver, devices=",".join(sorted(withheld)), reason=sorted(set(withheld.values()))[0]),
            )
        elif had_any:
            log.warning("no device plugin hands out this driver's devices any more; offering all of them", extra=fields(driver=driver))

    def _notify(self) -> None:
        """Tell the listeners of changed vendors, outside the lock: a listener (the publisher) takes its own lock,
        and the publisher calls `filter` while holding it."""
        with self._lock:
            callbacks = [c for vendor in sorted(self._changed) for c in self._listeners.get(vendor, [])]
            self._changed.clear()
        for callback in callbacks:
            callback()

    def poll(self) -> None:
        """Rescan when the last scan is older than the rescan interval (the daemon calls this every second):
        a device plugin started or stopped after the driver changes the slices within that interval."""
        self._refresh()
        with self._lock:
            for vendor in list(self._inventories):
                self._update(vendor)
        self._notify()

    def overlap(self) -> dict[str, int]:
        """Driver -> devices a device plugin also hands out that the driver offers (--offer-devices), as of the last scan."""
        with self._lock:
            return dict(self._overlap)

    def withheld(self, vendor: str) -> dict[str, str]:
        with self._lock:
            return dict(self._withheld.get(vendor, {}))

    def refusal(self, vendor: str, devices: Sequence[str]) -> str | None:
        """Why a prepare of these devices must fail, or None. With a device plugin of the vendor on the node,
        the pods holding its devices are asked live (PodResources List): a pod admitted a moment ago counts."""
        self._refresh()
        with self._lock:
            withheld = self._update(vendor)
            plugins = self._current_report().for_vendor(vendor)
            inventory = self._inventories.get(vendor)
        self._notify()
        if plugins is None or inventory is None:
            return None
        for name in devices:
            if name in withheld:
                return f"device {name} is withheld from this driver: {withheld[name]}"
        return self._held_now(vendor, inventory, devices)

    def _held_now(self, vendor: str, inventory: Inventory, devices: Sequence[str]) -> str | None:
        if self._pod_resources is None:
            return None
        try:
            holders = self._pod_resources.view(allocatable=False).holders
        except PodResourcesUnavailable as exc:
            # A device plugin of this vendor runs here and its pods cannot be seen: no device is known free.
            return (
                f"a {vendor} device plugin runs on this node and which devices its pods hold cannot be read ({exc}); "
                "refusing rather than risk handing out a GPU twice"
            )
        mine = [h for h in holders if vendor_of_resource(h.resource) == vendor]
        covered, _ = related(inventory, (h.device_id for h in mine))
        by_id = {h.device_id: h for h in mine}
        for name in devices:
            if name in covered:
                return f"device {name} is held by device-plugin {by_id[covered[name]].describe()}; it cannot be prepared for a claim too"
        return None
