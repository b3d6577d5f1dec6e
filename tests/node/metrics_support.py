"""What the node's metrics tests share: a daemon serving /metrics on a local port, and the samples it serves as
Prometheus parses them."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.node.example_backend import ExampleBackend
from tests.support import free_port

from dra_driver.backend.interface import BackendSettings, VendorBackend
from dra_driver.kube.claims import ClaimReader
from dra_driver.node.daemon import Daemon
from dra_driver.node.metrics_http import BindAddress
from dra_driver.node.plugin.driver import PluginSettings
from dra_driver.simulation.api_server import SimApiServer

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def metrics_daemon(settings: PluginSettings, apiserver: SimApiServer, port: int, backend: VendorBackend | None = None, **options: Any) -> Daemon:
    """A daemon (not started) with `backend`, the example backend by default, serving /metrics on 127.0.0.1:`port`."""
    backend = backend if backend is not None else ExampleBackend(BackendSettings(node_name="node-a"))
    return Daemon([backend], ClaimReader(apiserver.json_api()), settings, metrics_address=BindAddress("127.0.0.1", port), **options)


@contextmanager
def serving_metrics(settings: PluginSettings, apiserver: SimApiServer, backend: VendorBackend, **options: Any) -> Iterator[tuple[Daemon, int]]:
    """The daemon started with `backend`, /metrics on a free port; on exit the daemon stopped and the backend closed."""
    port = free_port()
    try:
        daemon = metrics_daemon(settings, apiserver, port, backend, **options)
        assert daemon.start().running == [backend.driver_name]
        try:
            yield daemon, port
        finally:
            daemon.stop()
    finally:
        backend.close()


def scrape(port: int) -> Samples:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in text_string_to_metric_families(text) for s in family.samples}


def series(got: Samples, name: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {key: value for (metric, key), value in got.items() if metric == name and all((k, v) in key for k, v in labels.items())}


def one(got: Samples, name: str, **labels: str) -> float:
    found = series(got, name, **labels)
    assert len(found) == 1, (name, labels, found)
    return next(iter(found.values()))


def assert_errors_counted_and_a_failed_power_reading_alone(
    got: Samples, driver: str, ecc: tuple[str, float, float], failed: str, other: str
) -> None:
    """After a collection with ECC errors injected on one device (`ecc`: device, corrected, uncorrected) and the power
    call failing on another (`failed`): the errors are counted, only that reading is missing, no collection failed."""
    device, corrected, uncorrected = ecc
    assert one(got, "dra_driver_device_errors_total", device=device, kind="ecc_corrected") == corrected
    assert one(got, "dra_driver_device_errors_total", device=device, kind="ecc_uncorrected") == uncorrected
    assert not series(got, "dra_driver_device_power_watts", device=failed)
    assert one(got, "dra_driver_device_temperature_celsius", device=failed) > 0
    assert one(got, "dra_driver_device_power_watts", device=other) > 0
    assert one(got, "dra_driver_device_metrics_errors_total", driver=driver) == 0
