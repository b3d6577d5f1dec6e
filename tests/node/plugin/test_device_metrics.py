"""Per-device and per-claim metrics of the node: the real NVIDIA backend over its simulated NVML, a real daemon,
real prepare over gRPC, and the /metrics text as Prometheus parses it."""

from __future__ import annotations

import socket
import threading
import urllib.request
from pathlib import Path

import pytest
from conftest import make_settings
from prometheus_client.parser import text_string_to_metric_families

from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.backend.interface import BackendSettings, ClaimRef
from dra_driver.node.metrics_http import BindAddress
from dra_driver.kube.claims import ClaimReader
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.daemon import Daemon
from dra_driver.node.device_metrics import DeviceMetricsCollector, DriverSource
from dra_driver.node.metrics import Metrics
from dra_driver.node.plugin.kubelet_client import register

nvidia = pytest.importorskip("dra_driver_nvidia.backend")
DRIVER = "gpu.nvidia.com"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scrape(port: int) -> Samples:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in text_string_to_metric_families(text) for s in family.samples}


def series(got: Samples, name: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {key: value for (metric, key), value in got.items() if metric == name and all((k, v) in key for k, v in labels.items())}


def one(got: Samples, name: str, **labels: str) -> float:
    found = series(got, name, **labels)
    assert len(found) == 1, (name, labels, found)
    return next(iter(found.values()))


@pytest.fixture
def h100_daemon(short_tmp: Path, apiserver):
    port = free_port()
    settings = make_settings(short_tmp)
    backend = nvidia.NvidiaBackend.from_profile(load_profile("dgx-h100").sections["nvidia"], BackendSettings(node_name="node-a"))
    daemon = Daemon(
        [backend], ClaimReader(apiserver.json_api()), settings, metrics_address=BindAddress("127.0.0.1", port), device_metrics_interval=3600
    )
    assert daemon.start().running == [DRIVER]
    try:
        yield daemon, port, backend
    finally:
        daemon.stop()
        backend.close()


def test_held_device_carries_its_claim_and_pod_and_reads_busier_than_idle_ones(h100_daemon, apiserver):
    daemon, port, backend = h100_daemon
    claim = allocated_claim_object("train", "team-a", DRIVER, "node-a", {"gpu": ["gpu-3"]})
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "trainer-0", "uid": "pod-uid-1"}]
    stored = apiserver.store.put(claim)
    ref = ClaimRef("team-a", "train", stored["metadata"]["uid"])
    conn = register(daemon.plugins[DRIVER].paths.registration_socket)
    try:
        assert conn.prepare([ref]).claims[ref.uid].error == ""
        utilizations = []
        for _ in range(8):  # the simulated readings settle over a few collections
            daemon.device_metrics.collect_once()
            got = scrape(port)
            utilizations.append(one(got, "dra_driver_device_utilization_ratio", device="gpu-3"))
        assert len(set(utilizations)) > 1  # the readings change between collections
        held = one(got, "dra_driver_device_utilization_ratio", device="gpu-3", namespace="team-a", claim="train")
        idle = one(got, "dra_driver_device_utilization_ratio", device="gpu-5", namespace="", claim="")
        assert held > 0.5 > 0.2 > idle
        uuid = backend.simulator.gpus[3].spec.uuid
        assert one(got, "dra_driver_device_holder_info", device="gpu-3", uuid=uuid, pci_bus_id="0000:61:00.0", pod="trainer-0", claim="train") == 1
        # every published device is reported, held or not, with its identity for joins
        assert len(series(got, "dra_driver_device_info")) == 8
        assert one(got, "dra_driver_device_memory_total_bytes", device="gpu-5") == 81559 * 2**20
        assert 0 < one(got, "dra_driver_device_memory_used_bytes", device="gpu-3") <= 81559 * 2**20
        assert 50 < one(got, "dra_driver_device_temperature_celsius", device="gpu-3") < 90
        assert one(got, "dra_driver_device_healthy", device="gpu-3") == 1
        assert one(got, "dra_driver_device_sharing", device="gpu-3", mode="exclusive") == 1
        assert one(got, "dra_driver_kubelet_registered", driver=DRIVER) == 1

        assert conn.unprepare([ref]).claims[ref.uid].error == ""
        daemon.device_metrics.collect_once()
        got = scrape(port)
        assert not series(got, "dra_driver_device_holder_info")
        assert set(series(got, "dra_driver_device_utilization_ratio", device="gpu-3")) == {
            (("claim", ""), ("device", "gpu-3"), ("driver", DRIVER), ("namespace", ""), ("pool", "node-a"))
        }
    finally:
        conn.close()


def test_error_counters_and_a_failing_reading_leave_the_other_readings(h100_daemon):
    daemon, port, backend = h100_daemon
    backend.simulator.inject_ecc(2, corrected=5, uncorrected=1)
    backend.simulator.fail("nvmlDeviceGetPowerUsage", "UNKNOWN", gpu=1)
    daemon.device_metrics.collect_once()
    got = scrape(port)
    assert one(got, "dra_driver_device_errors_total", device="gpu-2", kind="ecc_corrected") == 5
    assert one(got, "dra_driver_device_errors_total", device="gpu-2", kind="ecc_uncorrected") == 1
    assert not series(got, "dra_driver_device_power_watts", device="gpu-1")
    assert one(got, "dra_driver_device_temperature_celsius", device="gpu-1") > 0
    assert one(got, "dra_driver_device_power_watts", device="gpu-0") > 0
    assert one(got, "dra_driver_device_metrics_errors_total", driver=DRIVER) == 0


def test_xid_events_are_counted_per_gpu(h100_daemon):
    daemon, port, backend = h100_daemon
    backend.simulator.inject_xid(4, 79)
    for _ in range(50):
        daemon.device_metrics.collect_once()
        got = scrape(port)
        if one(got, "dra_driver_device_errors_total", device="gpu-4", kind="xid") == 1:
            break
        threading.Event().wait(0.1)
    assert one(got, "dra_driver_device_errors_total", device="gpu-4", kind="xid") == 1
    assert one(got, "dra_driver_device_errors_total", device="gpu-3", kind="xid") == 0


class _Exploding:
    driver_name = DRIVER

    def simulate_load(self, busy: object) -> None:
        pass

    def sample_devices(self) -> list[object]:
        raise RuntimeError("library gone")


def test_a_failing_backend_counts_an_error_and_keeps_its_devices_reported():
    metrics = Metrics()
    collector = DeviceMetricsCollector(metrics.holders, 15)
    metrics.add_collector(collector)
    collector.add(DriverSource(DRIVER, "node-a", _Exploding(), ["gpu-0"]))  # type: ignore[arg-type]
    collector.collect_once()
    text = metrics.exposition().body.decode()
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert one(got, "dra_driver_device_metrics_errors_total", driver=DRIVER) == 1
    assert one(got, "dra_driver_device_info", device="gpu-0", uuid="") == 1


def test_collection_never_waits_for_the_prepare_lock(h100_daemon):
    """Prepare holds the backend's lock through MIG creation; the collector must read without it."""
    daemon, port, backend = h100_daemon
    done = threading.Event()
    with backend._lock:
        worker = threading.Thread(target=lambda: (daemon.device_metrics.collect_once(), done.set()))
        worker.start()
        assert done.wait(10)
    worker.join()


def test_interval_below_the_floor_is_refused_and_zero_collects_nothing(short_tmp: Path, apiserver):
    with pytest.raises(ValueError, match="device-metrics-interval"):
        DeviceMetricsCollector(Metrics().holders, 0.1)
    collector = DeviceMetricsCollector(Metrics().holders, 0)
    assert collector.start()._thread is None


def test_devices_without_readings_take_their_identity_from_the_published_attributes():
    from dra_driver.node.device_metrics import identity_of

    metrics = Metrics()
    collector = DeviceMetricsCollector(metrics.holders, 15)
    metrics.add_collector(collector)
    attributes = {"uuid": "00ff74a1-0000", "resource.kubernetes.io/pciBusID": "0000:05:00.0", "productName": "MI300X"}
    collector.add(DriverSource("gpu.amd.com", "node-a", _Exploding(), ["gpu-0-128"], identity={"gpu-0-128": identity_of(attributes)}))  # type: ignore[arg-type]
    text = metrics.exposition().body.decode()
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert one(got, "dra_driver_device_info", device="gpu-0-128", uuid="00ff74a1-0000", pci_bus_id="0000:05:00.0", model="MI300X") == 1
