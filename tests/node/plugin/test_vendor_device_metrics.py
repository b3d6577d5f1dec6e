"""Per-device metrics of the AMD and Intel Gaudi backends: each real backend over its simulated lowest layer
(amdsmi module, HLML library and sysfs tree), a real daemon, real prepare over gRPC, and the /metrics text as
Prometheus parses it. The NVIDIA side is in test_device_metrics.py (its helpers are reused here)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import make_settings
from test_device_metrics import Samples, free_port, one, scrape, series

from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.backend.interface import BackendSettings, ClaimRef, VendorBackend
from dra_driver.kube.claims import ClaimReader
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.daemon import Daemon
from dra_driver.node.metrics_http import BindAddress
from dra_driver.node.plugin.kubelet_client import register

amd = pytest.importorskip("dra_driver_amd.backend")
gaudi = pytest.importorskip("dra_driver_gaudi.backend")
AMD = "gpu.amd.com"
GAUDI = "gaudi.intel.com"


def start_daemon(short_tmp: Path, apiserver: Any, backend: VendorBackend) -> tuple[Daemon, int]:
    port = free_port()
    daemon = Daemon(
        [backend],
        ClaimReader(apiserver.json_api()),
        make_settings(short_tmp),
        metrics_address=BindAddress("127.0.0.1", port),
        device_metrics_interval=3600,
    )
    assert daemon.start().running == [backend.driver_name]
    return daemon, port


@pytest.fixture
def amd_daemon(short_tmp: Path, apiserver: Any, request: pytest.FixtureRequest) -> Iterator[tuple[Daemon, int, Any]]:
    profile = getattr(request, "param", "mi300x")
    backend = amd.AmdBackend.from_profile(load_profile(profile).sections["amd"], BackendSettings(node_name="node-a"))
    daemon, port = start_daemon(short_tmp, apiserver, backend)
    try:
        yield daemon, port, backend
    finally:
        daemon.stop()
        backend.close()


@pytest.fixture
def gaudi_daemon(short_tmp: Path, apiserver: Any) -> Iterator[tuple[Daemon, int, Any]]:
    backend = gaudi.GaudiBackend.from_profile(load_profile("gaudi3-hls").sections["gaudi"], BackendSettings(node_name="node-a"))
    daemon, port = start_daemon(short_tmp, apiserver, backend)
    try:
        yield daemon, port, backend
    finally:
        daemon.stop()
        backend.close()


def prepare(daemon: Daemon, apiserver: Any, driver: str, device: str) -> tuple[Any, ClaimRef]:
    claim = allocated_claim_object("train", "team-a", driver, "node-a", {"acc": [device]})
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "trainer-0", "uid": "pod-uid-1"}]
    stored = apiserver.store.put(claim)
    ref = ClaimRef("team-a", "train", stored["metadata"]["uid"])
    conn = register(daemon.plugins[driver].paths.registration_socket)
    assert conn.prepare([ref]).claims[ref.uid].error == ""
    return conn, ref


def settle(daemon: Daemon, port: int, device: str, rounds: int = 8) -> tuple[Samples, list[float]]:
    """Collect `rounds` times (the simulated readings move towards their target over a few collections)."""
    values = []
    for _ in range(rounds):
        daemon.device_metrics.collect_once()
        got = scrape(port)
        values.append(one(got, "dra_driver_device_utilization_ratio", device=device))
    return got, values


# ---- AMD ------------------------------------------------------------------------------------------


def test_amd_held_gpu_carries_its_claim_and_reads_busier_than_idle_ones(amd_daemon, apiserver):
    daemon, port, backend = amd_daemon
    conn, ref = prepare(daemon, apiserver, AMD, "gpu-8-136")
    try:
        got, utilizations = settle(daemon, port, "gpu-8-136")
        assert len(set(utilizations)) > 1  # the readings change between collections
        held = one(got, "dra_driver_device_utilization_ratio", device="gpu-8-136", namespace="team-a", claim="train")
        idle = one(got, "dra_driver_device_utilization_ratio", device="gpu-16-144", namespace="", claim="")
        assert held > 0.5 > 0.2 > idle
        assert one(got, "dra_driver_device_power_watts", device="gpu-8-136") > 2 * one(got, "dra_driver_device_power_watts", device="gpu-16-144")
        assert 50 < one(got, "dra_driver_device_temperature_celsius", device="gpu-8-136") < 90
        assert one(got, "dra_driver_device_memory_total_bytes", device="gpu-16-144") == 196592 * 2**20
        assert 0 < one(got, "dra_driver_device_memory_used_bytes", device="gpu-8-136") <= 196592 * 2**20
        for kind in ("ecc_corrected", "ecc_uncorrected", "ecc_deferred"):
            assert one(got, "dra_driver_device_errors_total", device="gpu-8-136", kind=kind) == 0
        # the join labels: the UUID amdsmi gives and the GPU's bus ID, as the AMD exporter labels its series
        assert one(got, "dra_driver_device_holder_info", device="gpu-8-136", pci_bus_id="0000:26:00.0", pod="trainer-0", claim="train") == 1
        assert (
            one(got, "dra_driver_device_info", device="gpu-8-136", uuid="00ff74a1-0000-1000-8001-2a4b60001111", model="AMD_Instinct_MI300X_OAM") == 1
        )
        assert len(series(got, "dra_driver_device_info")) == 8
    finally:
        assert conn.unprepare([ref]).claims[ref.uid].error == ""
        conn.close()


def test_amd_a_failing_call_leaves_the_other_readings(amd_daemon):
    daemon, port, backend = amd_daemon
    backend.library.inject_ecc("0000:46:00.0", uncorrectable=1, correctable=7)
    backend.library.fail("amdsmi_get_power_info", "0000:26:00.0")
    daemon.device_metrics.collect_once()
    got = scrape(port)
    assert one(got, "dra_driver_device_errors_total", device="gpu-16-144", kind="ecc_corrected") == 7
    assert one(got, "dra_driver_device_errors_total", device="gpu-16-144", kind="ecc_uncorrected") == 1
    assert not series(got, "dra_driver_device_power_watts", device="gpu-8-136")
    assert one(got, "dra_driver_device_temperature_celsius", device="gpu-8-136") > 0
    assert one(got, "dra_driver_device_power_watts", device="gpu-0-128") > 0
    assert one(got, "dra_driver_device_metrics_errors_total", driver=AMD) == 0


@pytest.mark.parametrize("amd_daemon", ["mi300x-cpx"], indirect=True)
def test_amd_partitions_report_their_own_activity_and_memory_and_the_socket_power(amd_daemon, apiserver):
    """CPX: eight partitions per GPU, each its own amdsmi handle; power and temperature only on the primary's."""
    daemon, port, backend = amd_daemon
    conn, ref = prepare(daemon, apiserver, AMD, "gpu-1-129")  # partition 1 of the GPU at 0000:05:00.0
    try:
        got, _ = settle(daemon, port, "gpu-1-129")
        held = one(got, "dra_driver_device_utilization_ratio", device="gpu-1-129", claim="train")
        assert held > 0.5 > 0.2 > one(got, "dra_driver_device_utilization_ratio", device="gpu-2-130")
        assert one(got, "dra_driver_device_utilization_ratio", device="gpu-0-128") < 0.2  # partition 0 of the same GPU idles
        assert one(got, "dra_driver_device_memory_total_bytes", device="gpu-1-129") == 196592 // 8 * 2**20
        # the socket's power: the same for every partition of the GPU, busy because one partition is
        power = {one(got, "dra_driver_device_power_watts", device=f"gpu-{n}-{128 + n}") for n in range(8)}
        assert len(power) == 1 and power.pop() > 2 * one(got, "dra_driver_device_power_watts", device="gpu-8-136")
    finally:
        assert conn.unprepare([ref]).claims[ref.uid].error == ""
        conn.close()


# ---- Intel Gaudi ----------------------------------------------------------------------------------

G3_HELD, G3_IDLE = "0000-1c-00-0-0x1060", "0000-1b-00-0-0x1060"


def test_gaudi_held_device_carries_its_claim_and_reads_busier_than_idle_ones(gaudi_daemon, apiserver):
    daemon, port, backend = gaudi_daemon
    conn, ref = prepare(daemon, apiserver, GAUDI, G3_HELD)
    try:
        got, utilizations = settle(daemon, port, G3_HELD)
        assert len(set(utilizations)) > 1
        held = one(got, "dra_driver_device_utilization_ratio", device=G3_HELD, namespace="team-a", claim="train")
        assert held > 0.5 > 0.2 > one(got, "dra_driver_device_utilization_ratio", device=G3_IDLE, claim="")
        assert one(got, "dra_driver_device_power_watts", device=G3_HELD) > 2 * one(got, "dra_driver_device_power_watts", device=G3_IDLE)
        assert 50 < one(got, "dra_driver_device_temperature_celsius", device=G3_HELD) < 90
        assert one(got, "dra_driver_device_memory_total_bytes", device=G3_IDLE) == 128 * 2**30
        assert 0 < one(got, "dra_driver_device_memory_used_bytes", device=G3_HELD) <= 128 * 2**30
        assert one(got, "dra_driver_device_holder_info", device=G3_HELD, pci_bus_id="0000:1c:00.0", uuid="SIMG3-000102", pod="trainer-0") == 1
        assert one(got, "dra_driver_device_info", device=G3_HELD, model="Gaudi3") == 1
        for kind in ("ecc_corrected", "ecc_uncorrected", "hard_reset", "soft_reset"):
            assert one(got, "dra_driver_device_errors_total", device=G3_HELD, kind=kind) == 0
    finally:
        assert conn.unprepare([ref]).claims[ref.uid].error == ""
        conn.close()


def test_gaudi_a_failing_call_leaves_the_other_readings_and_resets_are_counted(gaudi_daemon):
    daemon, port, backend = gaudi_daemon
    backend.fake_hlml.inject_ecc("0000:1b:00.0", corrected=4, uncorrected=2)
    backend.fake_hlml.fail("hlmlDeviceGetPowerUsage", "0000:1c:00.0")
    backend.fake.count_hard_reset("0000:1b:00.0")  # the kernel's hard_reset_cnt in the sysfs tree
    daemon.device_metrics.collect_once()
    got = scrape(port)
    assert one(got, "dra_driver_device_errors_total", device=G3_IDLE, kind="ecc_corrected") == 4
    assert one(got, "dra_driver_device_errors_total", device=G3_IDLE, kind="ecc_uncorrected") == 2
    assert one(got, "dra_driver_device_errors_total", device=G3_IDLE, kind="hard_reset") == 1
    assert not series(got, "dra_driver_device_power_watts", device=G3_HELD)
    assert one(got, "dra_driver_device_temperature_celsius", device=G3_HELD) > 0
    assert one(got, "dra_driver_device_power_watts", device=G3_IDLE) > 0
    assert one(got, "dra_driver_device_metrics_errors_total", driver=GAUDI) == 0


def test_gaudi_without_hlml_reports_the_sysfs_counters_only(short_tmp, apiserver):
    """gaudi2-hls has no HLML (like Intel's faker): no readings, but every device and its reset counters."""
    backend = gaudi.GaudiBackend.from_profile(load_profile("gaudi2-hls").sections["gaudi"], BackendSettings(node_name="node-a"))
    daemon, port = start_daemon(short_tmp, apiserver, backend)
    try:
        daemon.device_metrics.collect_once()
        got = scrape(port)
        assert len(series(got, "dra_driver_device_info")) == 8
        assert not series(got, "dra_driver_device_utilization_ratio")
        assert one(got, "dra_driver_device_errors_total", device="0000-19-00-0-0x1020", kind="soft_reset") == 0
    finally:
        daemon.stop()
        backend.close()
