"""The /metrics endpoint after real calls, and a clear error for a busy --metrics-bind-address port."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

from conftest import make_settings
from example_backend import DRIVER, ExampleBackend
from prometheus_client.parser import text_string_to_metric_families

from dra_driver.node.daemon import Daemon
from dra_driver.kube.claims import ClaimReader
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node import metrics_http
from dra_driver.node.metrics_http import BindAddress
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import BackendSettings, ClaimRef


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_endpoint_counts_requests_claims_devices_and_errors(short_tmp: Path, apiserver):
    port = free_port()
    settings = make_settings(short_tmp)
    daemon = Daemon(
        [ExampleBackend(BackendSettings(node_name="node-a"))],
        ClaimReader(apiserver.json_api()),
        settings,
        metrics_address=BindAddress("127.0.0.1", port),
    )
    assert daemon.start().running == [DRIVER]
    try:
        good = apiserver.store.put(allocated_claim_object("good", "default", DRIVER, "node-a", {"gpu": ["gpu-0", "gpu-1"]}))
        bad = apiserver.store.put(
            allocated_claim_object(
                "bad",
                "default",
                DRIVER,
                "node-a",
                {"gpu": ["gpu-2"]},
                config=[{"source": "FromClaim", "requests": [], "opaque": {"driver": DRIVER, "parameters": {"fail": True}}}],
            )
        )
        refs = [ClaimRef("default", o["metadata"]["name"], o["metadata"]["uid"]) for o in (good, bad)]
        conn = register(PluginPaths(settings.kubelet_dir, DRIVER).registration_socket)
        response = conn.prepare(refs)
        assert response.claims[refs[0].uid].error == "" and response.claims[refs[1].uid].error != ""
        got = samples(port)
        method = next(
            labels
            for (name, labels) in got
            if name == "dra_driver_requests_total" and ("driver", DRIVER) in labels and any(k == "method" and "Prepare" in v for k, v in labels)
        )
        assert got[("dra_driver_requests_total", method)] == 1
        assert got[("dra_driver_claims_total", (("driver", DRIVER), ("operation", "prepare"), ("result", "ok")))] == 1
        assert got[("dra_driver_claims_total", (("driver", DRIVER), ("operation", "prepare"), ("result", "error")))] == 1
        assert got[("dra_driver_errors_total", (("driver", DRIVER), ("operation", "prepare")))] == 1
        assert got[("dra_driver_prepared_devices", (("driver", DRIVER),))] == 2
        method_labels = dict(method)["method"]
        count = got[("dra_driver_request_duration_seconds_count", (("driver", DRIVER), ("method", method_labels)))]
        assert count == 1
        conn.unprepare(refs[:1])
        assert samples(port)[("dra_driver_prepared_devices", (("driver", DRIVER),))] == 0
        conn.close()
    finally:
        daemon.stop()


def test_error_and_claim_counters_exist_at_zero_before_any_claim(short_tmp: Path, apiserver):
    """A node that never failed reads 0 errors, not "no data": the dashboard's prepare-errors panel and the
    DraPrepareErrorsRising alert see a series on a healthy cluster (it was empty there until the first failure)."""
    port = free_port()
    daemon = Daemon([ExampleBackend(BackendSettings(node_name="node-a"))], ClaimReader(apiserver.json_api()), make_settings(short_tmp),
                    metrics_address=BindAddress("127.0.0.1", port))  # fmt: skip
    assert daemon.start().running == [DRIVER]
    try:
        got = samples(port)
        for operation in ("prepare", "unprepare"):
            assert got[("dra_driver_errors_total", (("driver", DRIVER), ("operation", operation)))] == 0
            for result in ("ok", "error"):
                assert got[("dra_driver_claims_total", (("driver", DRIVER), ("operation", operation), ("result", result)))] == 0
    finally:
        daemon.stop()


def test_busy_metrics_port_never_stops_the_daemon_and_is_taken_once_free(short_tmp: Path, apiserver, monkeypatch):
    """The surge pod of a rolling update with host networking finds the old pod on the port: it must start, serve
    and register anyway, and serve metrics as soon as the old pod lets the port go."""
    monkeypatch.setattr(metrics_http, "DEFAULT_BIND_RETRY_S", 0.1)  # the default waits 5 s between tries
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    settings = make_settings(short_tmp)
    daemon = Daemon([ExampleBackend(BackendSettings(node_name="node-a"))], ClaimReader(apiserver.json_api()), settings,
                    metrics_address=BindAddress("127.0.0.1", port))  # fmt: skip
    try:
        assert daemon.start().running == [DRIVER]
        endpoint = daemon.metrics_endpoint
        assert endpoint is not None and not endpoint.wait_bound(0.2)
        conn = register(PluginPaths(settings.kubelet_dir, DRIVER).registration_socket)
        conn.close()
        holder.close()
        assert endpoint.wait_bound(5.0)
        assert samples(port)[("dra_driver_prepared_devices", (("driver", DRIVER),))] == 0
    finally:
        holder.close()
        daemon.stop()


def holder_series(port: int) -> tuple[set[tuple[str, ...]], set[tuple[str, ...]]]:
    got = samples(port)
    devices = {tuple(v for _, v in labels) for (name, labels), value in got.items() if name == "dra_driver_device_claim" and value > 0}
    pods = {tuple(v for _, v in labels) for (name, labels), value in got.items() if name == "dra_driver_claim_pod" and value > 0}
    return devices, pods


def test_holder_series_follow_prepare_unprepare_and_recovery(short_tmp: Path, apiserver):
    """Per-device holder gauges (sorted labels: claim, device, driver, namespace, pool) and the claim->pod link."""
    port = free_port()
    settings = make_settings(short_tmp)
    train = allocated_claim_object("train", "team-a", DRIVER, "node-a", {"gpu": ["gpu-0", "gpu-1"]})
    train["status"]["reservedFor"] = [
        {"resource": "pods", "name": "trainer-0", "uid": "p0"},
        {"resource": "things", "apiGroup": "x.io", "name": "not-a-pod", "uid": "t"},
    ]
    train = apiserver.store.put(train)
    infer = apiserver.store.put(allocated_claim_object("infer", "team-b", DRIVER, "node-a", {"gpu": ["gpu-2"]}))
    refs = [ClaimRef(o["metadata"]["namespace"], o["metadata"]["name"], o["metadata"]["uid"]) for o in (train, infer)]
    daemon = Daemon(
        [ExampleBackend(BackendSettings(node_name="node-a"))],
        ClaimReader(apiserver.json_api()),
        settings,
        metrics_address=BindAddress("127.0.0.1", port),
    )
    daemon.start()
    try:
        conn = register(PluginPaths(settings.kubelet_dir, DRIVER).registration_socket)
        assert all(not c.error for c in conn.prepare(refs).claims.values())
        devices, pods = holder_series(port)
        assert devices == {
            ("train", "gpu-0", DRIVER, "team-a", "node-a"),
            ("train", "gpu-1", DRIVER, "team-a", "node-a"),
            ("infer", "gpu-2", DRIVER, "team-b", "node-a"),
        }
        assert pods == {("train", DRIVER, "team-a", "trainer-0")}
        conn.unprepare(refs[1:])
        assert holder_series(port) == (
            {("train", "gpu-0", DRIVER, "team-a", "node-a"), ("train", "gpu-1", DRIVER, "team-a", "node-a")},
            {("train", DRIVER, "team-a", "trainer-0")},
        )
        conn.close()
    finally:
        daemon.stop()
    # A restarted daemon republishes what the checkpoint holds (pods are unknown until the next claim read).
    port = free_port()
    daemon = Daemon(
        [ExampleBackend(BackendSettings(node_name="node-a"))],
        ClaimReader(apiserver.json_api()),
        settings,
        metrics_address=BindAddress("127.0.0.1", port),
    )
    daemon.start()
    try:
        assert holder_series(port) == ({("train", "gpu-0", DRIVER, "team-a", "node-a"), ("train", "gpu-1", DRIVER, "team-a", "node-a")}, set())
        conn = register(PluginPaths(settings.kubelet_dir, DRIVER).registration_socket)
        conn.unprepare(refs[:1])
        assert holder_series(port) == (set(), set())
        conn.close()
    finally:
        daemon.stop()


def test_failed_prepare_leaves_no_holder_series(short_tmp: Path, apiserver):
    port = free_port()
    settings = make_settings(short_tmp)
    held = apiserver.store.put(allocated_claim_object("held", "default", DRIVER, "node-a", {"gpu": ["gpu-0"]}))
    thief = apiserver.store.put(allocated_claim_object("thief", "default", DRIVER, "node-a", {"gpu": ["gpu-0"]}))
    thief["status"]["reservedFor"] = "garbage"  # odd status from the server must not fail the claim for metrics' sake
    daemon = Daemon(
        [ExampleBackend(BackendSettings(node_name="node-a"))],
        ClaimReader(apiserver.json_api()),
        settings,
        metrics_address=BindAddress("127.0.0.1", port),
    )
    daemon.start()
    try:
        conn = register(PluginPaths(settings.kubelet_dir, DRIVER).registration_socket)
        refs = [ClaimRef("default", o["metadata"]["name"], o["metadata"]["uid"]) for o in (held, thief)]
        assert conn.prepare(refs[:1]).claims[refs[0].uid].error == ""
        assert "already prepared" in conn.prepare(refs[1:]).claims[refs[1].uid].error
        assert holder_series(port) == ({("held", "gpu-0", DRIVER, "default", "node-a")}, set())
        conn.close()
    finally:
        daemon.stop()


def test_deferred_metrics_keep_what_was_counted_before_load() -> None:
    """The daemon counts requests before prometheus_client is loaded (its sockets serve first); nothing is lost."""
    from prometheus_client import generate_latest

    from dra_driver.node.metrics import Metrics

    metrics = Metrics(load=False)
    assert metrics.registry is None
    with metrics.timed(DRIVER, "v1/NodePrepareResources"):
        pass
    metrics.claims.labels(DRIVER, "prepare", "ok").inc()
    metrics.claims.labels(DRIVER, "prepare", "ok").inc(2)
    metrics.prepared_devices.labels(DRIVER).set(5)
    early = metrics.errors.labels(DRIVER, "prepare")  # a child taken before load, used after it
    from dra_driver.node.metrics import HeldClaim

    metrics.holders.note_pods(DRIVER, "uid-1", ["pod-a"])
    metrics.holders.update(DRIVER, "uid-1", HeldClaim("uid-1", "default", "c1", [("node-a", "gpu-0")]))
    metrics.holders.update(DRIVER, "uid-2", HeldClaim("uid-2", "default", "c2", [("node-a", "gpu-1")]))
    metrics.holders.update(DRIVER, "uid-2", None)  # unprepared before load: never published
    metrics.load()
    early.inc()
    metrics.load()  # idempotent
    text = generate_latest(metrics.registry).decode()
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for family in text_string_to_metric_families(text) for s in family.samples}
    assert got[("dra_driver_claims_total", (("driver", DRIVER), ("operation", "prepare"), ("result", "ok")))] == 3
    assert got[("dra_driver_prepared_devices", (("driver", DRIVER),))] == 5
    assert got[("dra_driver_errors_total", (("driver", DRIVER), ("operation", "prepare")))] == 1
    assert got[("dra_driver_requests_total", (("driver", DRIVER), ("method", "v1/NodePrepareResources"), ("result", "ok")))] == 1
    assert got[("dra_driver_request_duration_seconds_count", (("driver", DRIVER), ("method", "v1/NodePrepareResources")))] == 1
    held = {labels for (name, labels), value in got.items() if name == "dra_driver_device_claim" and value > 0}
    assert held == {(("claim", "c1"), ("device", "gpu-0"), ("driver", DRIVER), ("namespace", "default"), ("pool", "node-a"))}
    assert got[("dra_driver_claim_pod", (("claim", "c1"), ("driver", DRIVER), ("namespace", "default"), ("pod", "pod-a")))] == 1


def test_every_family_counted_before_load_is_replayed_after_it():
    """Deferred loading (the daemon loads prometheus_client after its sockets serve) must cover every family."""
    from dra_driver.node.metrics import HeldClaim, Metrics

    metrics = Metrics(load=False)
    metrics.state_damage.labels(DRIVER, "record").inc()
    metrics.errors.labels(DRIVER, "prepare").inc()
    metrics.holders.update(DRIVER, "uid-1", HeldClaim("uid-1", "ns", "c", [("node-a", "gpu-0")]))
    metrics.load()
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for family in metrics.registry.collect() for s in family.samples}
    assert got[("dra_driver_state_damage_total", (("driver", DRIVER), ("kind", "record")))] == 1
    assert got[("dra_driver_errors_total", (("driver", DRIVER), ("operation", "prepare")))] == 1
    assert got[("dra_driver_device_claim", (("claim", "c"), ("device", "gpu-0"), ("driver", DRIVER), ("namespace", "ns"), ("pool", "node-a")))] == 1
