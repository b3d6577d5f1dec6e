"""Per-device and per-claim metrics of the node: readings from the vendor libraries, labelled with the holding claim.

A background thread asks each backend for its devices' readings (`VendorBackend.sample_devices`) every
`interval` seconds and keeps the last answer. Scrapes never call a vendor library: they render the last
readings with the holders known at that moment (DeviceHolders), so a scrape costs the same whatever
the hardware, and a slow or hung library delays only the collector thread. The thread takes no lock a
claim call needs: the holders are copied under their own short lock, and backends read their published
index without their prepare lock.

Also here: the daemon's state as gauges (registered with the kubelet, ready, slices published,
publish failures, device-plugin overlap), read at scrape time from what the daemon already tracks.
docs/metrics.md lists every series and its cardinality.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.backend.interface import DeviceSample, VendorBackend
from dra_driver.backend.vocabulary import PCI_BUS_ID
from dra_driver.common.logs import fields
from dra_driver.common.periodic import Periodic
from dra_driver.node.metrics import DeviceHolders, HolderView

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 15.0
MIN_INTERVAL_S = 1.0  # below this the collector would compete with prepare for the interpreter lock
SHARING_MODES = ("exclusive", "mps", "time-slicing")


@dataclass
class DriverSource:
    """One driver as the collector sees it."""

    driver: str
    pool: str
    backend: VendorBackend
    devices: Sequence[str]  # every device the node publishes for this driver (reported with or without readings)
    health: Callable[[], Mapping[str, bool]] = dict  # device -> healthy (the plugin's health hub)
    # device -> (uuid, PCI bus ID, model) from the published attributes: the info series of a device without readings
    identity: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)


def identity_of(attributes: Mapping[str, object]) -> tuple[str, str, str]:
    """(uuid, PCI bus ID, model) of a device from its published attributes (the parent's bus ID for a partition)."""
    def text(*names: str) -> str:
        return next((str(attributes[name]) for name in names if name in attributes), "")

    return text("uuid"), text(PCI_BUS_ID, "parentPciBusID"), text("productName", "model")


@dataclass
class _Collected:
    samples: dict[str, DeviceSample] = field(default_factory=dict)  # device -> last sample
    duration_s: float = 0.0
    errors: int = 0


@dataclass(frozen=True)
class DaemonState:
    """The daemon's own state for the status gauges, read at scrape time; every callable answers from memory."""

    registered: Callable[[], Mapping[str, bool]]  # driver -> the kubelet registered it
    ready: Callable[[], Mapping[str, bool]]  # driver -> ready (docs/plugin.md, "Readiness")
    slices: Callable[[], Mapping[str, tuple[str, int, int]]]  # driver -> (pool, slices published, publish failures)
    overlap: Callable[[], Mapping[str, int]]  # driver -> devices a device plugin also hands out that are still offered


class DeviceMetricsCollector:
    """The collector thread, and a prometheus_client collector rendering its last readings (Metrics.add_collector)."""

    def __init__(self, holders: DeviceHolders, interval: float = DEFAULT_INTERVAL_S, state: DaemonState | None = None) -> None:
        if interval and interval < MIN_INTERVAL_S:
            raise ValueError(f"--device-metrics-interval {interval}: use at least {MIN_INTERVAL_S:g} s, or 0 to turn device metrics off")
        self.interval = interval
        self._holders = holders
        self._state = state
        self._sources: dict[str, DriverSource] = {}
        self._collected: dict[str, _Collected] = {}
        self._lock = threading.Lock()  # guards the two dicts above; held only to swap references
        self._collecting = threading.Lock()  # one collection at a time (never a lock prepare takes)
        self._periodic = Periodic("device-metrics", self.collect_once, interval, log, "device metrics collection failed")

    # ---- the collector thread -------------------------------------------------------

    def add(self, source: DriverSource) -> None:
        with self._lock:
            self._sources[source.driver] = source
            self._collected.setdefault(source.driver, _Collected())

    def remove(self, driver: str) -> None:
        with self._lock:
            self._sources.pop(driver, None)
            self._collected.pop(driver, None)

    def collect_once(self) -> None:
        """One collection of every driver (the thread's step; tests and the bench call it directly). Collections run
        one at a time, so an older one never finishes after, and overwrites, a newer one."""
        with self._collecting:
            with self._lock:
                sources = list(self._sources.values())
            for source in sources:
                self._collect_driver(source)

    def _collect_driver(self, source: DriverSource) -> None:
        view = self._holders.holders_of(source.driver)
        start = time.perf_counter()
        failed = False
        samples: dict[str, DeviceSample] | None = None
        try:
            source.backend.simulate_load({device for pool, device in view.devices if pool == source.pool})
            samples = {sample.device: sample for sample in source.backend.sample_devices()}
        except Exception as exc:  # a broken library costs this collection, never the daemon
            failed = True
            log.warning("device metrics collection failed", extra=fields(driver=source.driver, error=f"{type(exc).__name__}: {exc}"))
        duration = time.perf_counter() - start
        with self._lock:
            collected = self._collected.get(source.driver)
            if collected is None:  # removed meanwhile
                return
            if samples is not None:
                collected.samples = samples
            collected.duration_s = duration
            collected.errors += int(failed)

    @property
    def running(self) -> bool:
        """Whether the collector thread runs (never with interval 0: device metrics off)."""
        return self._periodic.running

    def start(self) -> DeviceMetricsCollector:
        if self.interval and not self._periodic.running:
            self._periodic.start()
        return self

    def stop(self) -> None:
        self._periodic.stop()

    # ---- rendering (prometheus_client custom collector) ---------------------------

    def describe(self) -> list[Any]:
        return _families()

    def collect(self) -> Iterator[Any]:
        families = _families()
        with self._lock:
            drivers = [(source, self._collected[source.driver]) for source in self._sources.values()]
            snapshot = [(source, dict(collected.samples), collected.duration_s, collected.errors) for source, collected in drivers]
        by_name = {family.name: family for family in families}
        for source, samples, duration, errors in snapshot:
            view = self._holders.holders_of(source.driver)
            health = source.health()
            by_name["dra_driver_device_metrics_collect_seconds"].add_metric([source.driver], duration)
            by_name["dra_driver_device_metrics_errors"].add_metric([source.driver], errors)
            for device in source.devices:
                _render_device(by_name, source, device, samples.get(device), view, health.get(device))
        if self._state is not None:
            _render_state(by_name, self._state)
        yield from families


def _families() -> list[Any]:
    """Fresh, empty metric families (one set per scrape)."""
    from dra_driver.common.prometheus import CounterMetricFamily, GaugeMetricFamily

    def gauge(name: str, text: str, labels: Sequence[str]) -> Any:
        return GaugeMetricFamily(name, text, labels=list(labels))

    def counter(name: str, text: str, labels: Sequence[str]) -> Any:
        return CounterMetricFamily(name, text, labels=list(labels))

    device = ("driver", "pool", "device")
    holder = (*device, "namespace", "claim")
    return [
        gauge(
            "dra_driver_device_info",
            "Every device the node publishes, value 1: its UUID and PCI bus ID for joins onto vendor exporters",
            (*device, "uuid", "pci_bus_id", "model"),
        ),
        gauge(
            "dra_driver_device_holder_info",
            "Held device and pod, value 1: UUID and PCI bus ID beside claim and pod (join onto DCGM_FI_DEV_*)",
            (*device, "uuid", "pci_bus_id", "namespace", "claim", "pod"),
        ),
        gauge("dra_driver_device_utilization_ratio", "Device utilization, 0..1 (per holder; namespace and claim empty without one)", holder),
        gauge("dra_driver_device_memory_used_bytes", "Device memory in use (per holder)", holder),
        gauge("dra_driver_device_memory_total_bytes", "Device memory", device),
        gauge("dra_driver_device_power_watts", "Power draw of the device (a partition reports its parent's)", holder),
        gauge("dra_driver_device_temperature_celsius", "Device temperature (a partition reports its parent's)", holder),
        counter(
            "dra_driver_device_errors",
            "Device error counters as the vendor library counts them (kind: ecc_corrected, ecc_uncorrected, xid, ...)",
            (*device, "kind"),
        ),
        gauge("dra_driver_device_healthy", "1 while the device is healthy, 0 while its health source reports it unhealthy", device),
        gauge("dra_driver_device_sharing", "How the device is shared now, value 1 (mode: exclusive, mps, time-slicing)", (*device, "mode")),
        gauge("dra_driver_mps_daemon_up", "1 while the MPS control daemon of a claim on the device runs, 0 when it is gone", holder),
        gauge("dra_driver_device_metrics_collect_seconds", "Duration of the last device metrics collection", ("driver",)),
        counter("dra_driver_device_metrics_errors", "Device metrics collections that failed", ("driver",)),
        gauge("dra_driver_kubelet_registered", "1 while the kubelet has this driver registered", ("driver",)),
        gauge("dra_driver_ready", "1 while the driver is ready (registered, DRA service answering, slices published)", ("driver",)),
        gauge("dra_driver_pool_slices", "ResourceSlices this node publishes for the pool", ("driver", "pool")),
        counter("dra_driver_publish_errors", "Slice publications that failed (retried with backoff)", ("driver",)),
        gauge(
            "dra_driver_device_plugin_overlap_devices",
            "Devices a device plugin on the node also hands out that the driver still offers (--offer-devices)",
            ("driver",),
        ),
    ]


def _render_device(
    families: Mapping[str, Any], source: DriverSource, device: str, sample: DeviceSample | None, view: HolderView, healthy: bool | None
) -> None:
    base = [source.driver, source.pool, device]
    known_uuid, known_bus, known_model = source.identity.get(device, ("", "", ""))
    uuid = (sample.uuid if sample is not None else "") or known_uuid
    bus = (sample.pci_bus_id if sample is not None else "") or known_bus
    model = (sample.model if sample is not None else "") or known_model
    families["dra_driver_device_info"].add_metric([*base, uuid, bus, model], 1)
    holders = view.devices.get((source.pool, device), [])
    for namespace, claim in holders:
        for pod in sorted(set(view.pods.get((namespace, claim), []))) or [""]:
            families["dra_driver_device_holder_info"].add_metric([*base, uuid, bus, namespace, claim, pod], 1)
    families["dra_driver_device_healthy"].add_metric(base, 0 if healthy is False else 1)
    if sample is None:
        return
    for holder in holders or [("", "")]:
        labels = [*base, *holder]
        for name, value in (
            ("dra_driver_device_utilization_ratio", sample.utilization),
            ("dra_driver_device_memory_used_bytes", sample.memory_used_bytes),
            ("dra_driver_device_power_watts", sample.power_watts),
            ("dra_driver_device_temperature_celsius", sample.temperature_celsius),
        ):
            if value is not None:
                families[name].add_metric(labels, value)
    if sample.memory_total_bytes is not None:
        families["dra_driver_device_memory_total_bytes"].add_metric(base, sample.memory_total_bytes)
    for kind, count in sorted(sample.errors.items()):
        families["dra_driver_device_errors"].add_metric([*base, kind], count)
    families["dra_driver_device_sharing"].add_metric([*base, sample.sharing], 1)
    for claim_uid, up in sorted(sample.mps_daemons.items()):
        namespace, claim = view.claims.get(claim_uid, ("", claim_uid))  # a claim not prepared by this instance: named by UID
        families["dra_driver_mps_daemon_up"].add_metric([*base, namespace, claim], 1 if up else 0)


def _render_state(families: Mapping[str, Any], state: DaemonState) -> None:
    for driver, registered in sorted(state.registered().items()):
        families["dra_driver_kubelet_registered"].add_metric([driver], 1 if registered else 0)
    for driver, ready in sorted(state.ready().items()):
        families["dra_driver_ready"].add_metric([driver], 1 if ready else 0)
    for driver, (pool, slices, failures) in sorted(state.slices().items()):
        families["dra_driver_pool_slices"].add_metric([driver, pool], slices)
        families["dra_driver_publish_errors"].add_metric([driver], failures)
    for driver, overlap in sorted(state.overlap().items()):
        families["dra_driver_device_plugin_overlap_devices"].add_metric([driver], overlap)
