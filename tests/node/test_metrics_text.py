"""The daemon's /metrics text is what prometheus_client.exposition.generate_latest writes, byte for byte, for every
family the daemon registers (the request counters and histogram, the gauges, the holder gauges, the device-metrics
collector with its state gauges), with label values that need escaping."""

from __future__ import annotations

import pytest
from prometheus_client.exposition import generate_latest

from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.backend.interface import BackendSettings
from dra_driver.common.prometheus_text import CONTENT_TYPE, generate_text
from dra_driver.node.device_metrics import DaemonState, DeviceMetricsCollector, DriverSource
from dra_driver.node.metrics import HeldClaim, Metrics

nvidia = pytest.importorskip("dra_driver_nvidia.backend")
DRIVER = "gpu.nvidia.com"
# What a label value may hold that the text format escapes (backslash, double quote, newline) or keeps (UTF-8).
HOSTILE = 'team "a"\\b\nc-é✓'


def test_the_daemons_registry_renders_as_generate_latest_renders_it() -> None:
    backend = nvidia.NvidiaBackend.from_profile(load_profile("dgx-h100").sections["nvidia"], BackendSettings(node_name="node-a"))
    try:
        metrics = Metrics()
        state = DaemonState(
            registered=lambda: {DRIVER: True, HOSTILE: False},
            ready=lambda: {DRIVER: True},
            slices=lambda: {DRIVER: ("node-a", 1, 0), HOSTILE: (HOSTILE, 2, 3)},
            overlap=lambda: {DRIVER: 0},
        )
        collector = DeviceMetricsCollector(metrics.holders, 15, state)
        metrics.add_collector(collector)
        collector.add(DriverSource(DRIVER, "node-a", backend, [f"gpu-{i}" for i in range(8)]))
        with metrics.timed(DRIVER, "v1/NodePrepareResources"):
            pass
        with pytest.raises(RuntimeError), metrics.timed(HOSTILE, "v1/NodeUnprepareResources"):
            raise RuntimeError("counted as result=error")
        for family, labels in ((metrics.claims, (HOSTILE, "prepare", "ok")), (metrics.state_damage, (DRIVER, HOSTILE)),
                               (metrics.errors, (DRIVER, "prepare"))):  # fmt: skip
            family.labels(*labels).inc(3)
        metrics.prepared_devices.labels(DRIVER).set(1e6)
        metrics.withheld_devices.labels(HOSTILE).set(float("inf"))
        metrics.latency.labels(DRIVER, "v1/NodePrepareResources").observe(0.0123)
        metrics.holders.note_pods(DRIVER, "uid-1", [HOSTILE, "pod-0"])
        metrics.holders.update(DRIVER, "uid-1", HeldClaim("uid-1", HOSTILE, 'claim\\"', [("node-a", "gpu-3")]))
        backend.discover()
        collector.collect_once()

        ours, theirs = generate_text(metrics.registry), generate_latest(metrics.registry)
        answer = metrics.exposition()
    finally:
        backend.close()
    assert ours == theirs
    assert answer.body == theirs and answer.content_type == CONTENT_TYPE
    text = ours.decode()
    assert {line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith("# TYPE ")} == {"counter", "histogram", "gauge"}
    assert 'namespace="team \\"a\\"\\\\b\\nc-é✓"' in text  # escaped as the format says, UTF-8 kept
    assert "# TYPE dra_driver_requests_created gauge" in text  # the OpenMetrics-only samples moved after their family
    assert 'dra_driver_device_holder_info{claim="claim\\\\\\"",device="gpu-3"' in text  # the collector's holder series
    assert 'dra_driver_prepared_devices{driver="gpu.nvidia.com"} 1e+06' in text
