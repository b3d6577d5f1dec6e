"""The plugin over real unix sockets, driven the way the kubelet drives it."""

from __future__ import annotations

import json
import os
import socket
import stat

import grpc
import pytest
from tests.node.conftest import Node, make_settings
from tests.node.example_backend import DRIVER, ExampleBackend

from dra_driver.api.drahealth.v1 import api_pb2 as health_v1_pb2
from dra_driver.api.drahealth.v1alpha1 import api_pb2 as health_pb2
from dra_driver.api.pluginregistration.v1 import api_pb2 as reg_pb2
from dra_driver.api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from dra_driver.node.daemon import Daemon
from dra_driver.kube.claims import ClaimReader
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import BackendSettings, ClaimRef, HealthEvent


def test_get_info_and_socket_layout(node: Node):
    paths = node.paths
    assert paths.registration_socket == node.root / "kubelet" / "plugins_registry" / f"{DRIVER}-reg.sock"
    assert paths.dra_socket == node.root / "kubelet" / "plugins" / DRIVER / "dra.sock"
    assert stat.S_ISSOCK(paths.registration_socket.stat().st_mode) and stat.S_ISSOCK(paths.dra_socket.stat().st_mode)
    conn = node.connect()
    assert conn.info.type == "DRAPlugin"
    assert conn.info.name == DRIVER
    assert conn.info.endpoint == str(paths.dra_socket) and os.path.isabs(conn.info.endpoint)
    assert list(conn.info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]
    assert conn.service == "v1.DRAPlugin"
    registration = node.daemon.plugins[DRIVER].registration
    assert registration.status is not None and registration.status.registered


def test_rejected_registration_is_recorded_and_answered_with_error(node: Node):
    with grpc.insecure_channel(f"unix://{node.paths.registration_socket}") as channel:
        stub = reg_grpc.RegistrationStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.NotifyRegistrationStatus(reg_pb2.RegistrationStatus(plugin_registered=False, error="endpoint already registered"), timeout=5)
    assert "endpoint already registered" in err.value.details()
    status = node.daemon.plugins[DRIVER].registration.status
    assert status is not None and not status.registered and status.error == "endpoint already registered"


@pytest.mark.parametrize("version", ["v1.DRAPlugin", "v1beta1.DRAPlugin"])
def test_prepare_unprepare_round_trip(node: Node, version: str):
    conn = node.connect(only=version)
    assert conn.service == version
    ref = node.add_claim("train", {"gpu": ["gpu-0", "gpu-1"], "aux": ["gpu-5"]})
    response = conn.prepare([ref])
    assert list(response.claims) == [ref.uid]
    entry = response.claims[ref.uid]
    assert entry.error == ""
    got = {(d.device_name, tuple(d.request_names), d.pool_name) for d in entry.devices}
    assert got == {("gpu-0", ("gpu",), "node-a"), ("gpu-1", ("gpu",), "node-a"), ("gpu-5", ("aux",), "node-a")}
    spec_file = node.cdi_dir / f"k8s.{DRIVER}-device_{ref.uid}.json"
    spec = json.loads(spec_file.read_text())
    assert spec["kind"] == f"k8s.{DRIVER}/device"
    names = {d["name"] for d in spec["devices"]}
    for device in entry.devices:
        request = device.request_names[0]
        own = f"{ref.uid}-node-a-{device.device_name}"
        assert list(device.cdi_device_ids) == [f"k8s.{DRIVER}/device={own}", f"k8s.{DRIVER}/device={ref.uid}-request-{request}"]
        assert own in names and f"{ref.uid}-request-{request}" in names
    assert spec["containerEdits"]["env"] == ["EXAMPLE_VISIBLE_DEVICES=gpu-0,gpu-1,gpu-5"]
    if version == "v1.DRAPlugin":
        assert not any(d.HasField("share_id") for d in entry.devices)

    unprepared = conn.unprepare([ref])
    assert list(unprepared.claims) == [ref.uid] and unprepared.claims[ref.uid].error == ""
    assert not spec_file.exists()
    assert [op for op, _ in node.backend.calls] == ["reconcile", "prepare", "unprepare"]
    assert node.backend.calls[-1][1]["state"] == {"uid": ref.uid, "devices": ["gpu-0", "gpu-1", "gpu-5"]}


def test_prepare_is_idempotent_from_checkpoint(node: Node):
    conn = node.connect()
    ref = node.add_claim("c", {"gpu": ["gpu-2"]})
    first = conn.prepare([ref])
    node.server.delete_as_other("ResourceClaim", "c", "default")  # a repeat must not need the API server
    second = conn.prepare([ref])
    assert second == first
    assert [op for op, _ in node.backend.calls].count("prepare") == 1


def test_unprepare_works_without_claim_object_and_for_unknown_claims(node: Node):
    conn = node.connect()
    ref = node.add_claim("gone", {"gpu": ["gpu-3"]})
    conn.prepare([ref])
    node.server.delete_as_other("ResourceClaim", "gone", "default")
    response = conn.unprepare([ref, ClaimRef("default", "never", "11111111-0000-0000-0000-000000000000")])
    assert set(response.claims) == {ref.uid, "11111111-0000-0000-0000-000000000000"}
    assert all(v.error == "" for v in response.claims.values())
    assert conn.unprepare([ref]).claims[ref.uid].error == ""  # twice is fine
    assert not any(node.cdi_dir.iterdir())


def test_subrequest_results_use_base_request_name(node: Node):
    conn = node.connect()
    stored = node.server.store.put(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "prio", "namespace": "default"},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": [{"request": "gpu/large", "driver": DRIVER, "pool": "node-a", "device": "gpu-4"}]}}},
        }
    )
    ref = ClaimRef("default", "prio", stored["metadata"]["uid"])
    entry = conn.prepare([ref]).claims[ref.uid]
    assert entry.error == "" and list(entry.devices[0].request_names) == ["gpu"]


def test_share_id_is_returned_on_v1_only(node: Node):
    share = "4f1c2d3e-0000-4000-8000-000000000001"
    stored = node.server.store.put(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "shared", "namespace": "default"},
            "spec": {"devices": {"requests": []}},
            "status": {
                "allocation": {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-6", "shareID": share}]}}
            },
        }
    )
    uid = stored["metadata"]["uid"]
    ref = ClaimRef("default", "shared", uid)
    v1_entry = node.connect().prepare([ref]).claims[uid]
    assert v1_entry.devices[0].share_id == share
    assert v1_entry.devices[0].cdi_device_ids[0].endswith(f"={uid}-node-a-gpu-6-{share}")
    beta_entry = node.connect(only="v1beta1.DRAPlugin").prepare([ref]).claims[uid]
    assert beta_entry.devices[0].device_name == "gpu-6"


@pytest.mark.parametrize(("service", "pb"), [("v1alpha1.DRAResourceHealth", health_pb2), ("v1.DRAResourceHealth", health_v1_pb2)])
def test_health_stream_reports_all_devices_and_changes(node: Node, service, pb):
    """Each package a kubelet generation dials (1.35-1.36: v1alpha1; 1.37: v1) streams the same states, reason included."""
    conn = node.connect()
    stream = conn.watch_health(service)
    first = next(stream)
    assert isinstance(first, pb.NodeWatchResourcesResponse)
    assert {d.device.device_name for d in first.devices} == {f"gpu-{i}" for i in range(8)}
    assert all(d.health == pb.HEALTHY and d.device.pool_name == "node-a" and d.message == "" for d in first.devices)
    node.daemon.plugins[DRIVER].on_health_event(HealthEvent(device="gpu-3", healthy=False, reason="XID 79"))
    second = next(stream)
    states = {d.device.device_name: (d.health, d.message) for d in second.devices}
    assert states["gpu-3"] == (pb.UNHEALTHY, "XID 79") and states["gpu-2"] == (pb.HEALTHY, "")
    stream.cancel()


def test_health_message_is_cut_at_the_kubelets_limit_and_says_so(node: Node):
    conn = node.connect()
    stream = conn.watch_health("v1.DRAResourceHealth")
    next(stream)
    node.daemon.plugins[DRIVER].on_health_event(HealthEvent(device="gpu-1", healthy=False, reason="x" * 5000))
    message = {d.device.device_name: d.message for d in next(stream).devices}["gpu-1"]
    assert len(message) == 1024 and message.endswith("...")
    stream.cancel()


def test_health_streams_of_both_packages_share_one_stream_budget(node: Node):
    """A client opening v1 and v1alpha1 streams gets no more threads than the socket reserved for streams."""
    conn = node.connect()
    servicer = node.daemon.plugins[DRIVER].health
    assert servicer is not None
    limit = servicer.slots.limit
    streams = [conn.watch_health("v1.DRAResourceHealth" if i % 2 else "v1alpha1.DRAResourceHealth") for i in range(limit)]
    for stream in streams:
        next(stream)
    extra = conn.watch_health("v1.DRAResourceHealth")
    with pytest.raises(grpc.RpcError) as refused:
        next(extra)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    for stream in streams:
        stream.cancel()


def test_stop_removes_own_sockets_only(short_tmp, apiserver):
    settings = make_settings(short_tmp)
    paths = PluginPaths(settings.kubelet_dir, DRIVER)
    # A stale socket at our own path (crashed earlier run) is replaced.
    paths.dra_socket.parent.mkdir(parents=True)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(paths.dra_socket))
    stale.close()
    other = paths.registry_dir / "other.driver-reg.sock"
    other.parent.mkdir(parents=True)
    keep = socket.socket(socket.AF_UNIX)
    keep.bind(str(other))
    daemon = Daemon([ExampleBackend(BackendSettings(node_name="node-a"))], ClaimReader(apiserver.json_api()), settings)
    assert daemon.start().running == [DRIVER]
    register(paths.registration_socket)  # the new server answers on the reused path
    daemon.stop()
    assert not paths.registration_socket.exists() and not paths.dra_socket.exists()
    assert other.exists()
    keep.close()


def test_pod_uid_gives_per_instance_sockets(short_tmp, apiserver):
    settings = make_settings(short_tmp, pod_uid="pod-1234")
    daemon = Daemon([ExampleBackend(BackendSettings(node_name="node-a"))], ClaimReader(apiserver.json_api()), settings)
    daemon.start()
    try:
        paths = PluginPaths(settings.kubelet_dir, DRIVER, "pod-1234", settings.state_dir)
        assert paths.registration_socket.name == f"{DRIVER}-pod-1234-reg.sock"
        assert paths.dra_socket.name == "dra-pod-1234.sock"
        assert paths.serialize_lock == settings.state_dir / DRIVER / "serialize.lock"
        assert paths.serialize_lock.exists() and not (paths.plugin_dir / "serialize.lock").exists()
        conn = register(paths.registration_socket)
        assert conn.info.endpoint == str(paths.dra_socket)
    finally:
        daemon.stop()


def test_one_failing_backend_does_not_stop_others(short_tmp, apiserver):
    class Broken(ExampleBackend):
        driver_name = "broken.example.com"

        def discover(self):
            raise RuntimeError("library exploded")

    settings = make_settings(short_tmp)
    daemon = Daemon([Broken(BackendSettings()), ExampleBackend(BackendSettings(node_name="node-a"))], ClaimReader(apiserver.json_api()), settings)
    status = daemon.start()
    try:
        assert status.running == [DRIVER] and "library exploded" in status.failed["broken.example.com"]
        register(PluginPaths(settings.kubelet_dir, DRIVER).registration_socket)
    finally:
        daemon.stop()
