"""The kubelet's side of device plugins, at the lowest layer: a PodResources v1 gRPC server on a real unix
socket, device-plugin sockets and the kubelet's device-manager checkpoint as real files in a temp kubelet dir."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from tests.node.conftest import make_settings

from dra_driver.api.podresources.v1 import api_pb2 as pr_pb2
from dra_driver.api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from dra_driver.api.podresources.v1 import api_pb2_grpc as pr_grpc
from dra_driver.node.daemon import Daemon
from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.kube.claims import ClaimReader
from dra_driver.node.checks.same_name import ConflictBoard
from dra_driver.node.plugin.registration import RegistrationServicer
from dra_driver.node.plugin.sockets import UnixServer
from dra_driver.node.publisher.daemon_adapter import publisher_factory
from dra_driver.backend.interface import BackendSettings


@contextmanager
def nvidia_daemon(
    server: Any, root: Path, pod_uid: str | None = None, recheck_interval: float = 10.0, flags: dict[str, str] | None = None
) -> Iterator[Daemon]:
    """A daemon with the NVIDIA backend (dgx-h100 profile) under `root`, publishing to `server`, wired as `run` wires it
    (one ConflictBoard shared by the daemon and its publishers)."""
    import dataclasses

    from dra_driver_nvidia.backend import NvidiaBackend

    settings = dataclasses.replace(make_settings(root, pod_uid), flags=flags or {})
    backend = NvidiaBackend.from_profile(load_profile("dgx-h100").sections["nvidia"], BackendSettings(node_name="node-a"))
    api = server.json_api()
    conflicts = ConflictBoard()
    factory = publisher_factory(api, "node-a", conflicts=conflicts)
    daemon = Daemon([backend], ClaimReader(api), settings, publisher_factory=factory, conflicts=conflicts, recheck_interval=recheck_interval)
    try:
        daemon.start()
        yield daemon
    finally:
        daemon.stop()
        backend.close()


@dataclass
class PodResourcesState:
    """What the fake kubelet answers: resource -> advertised IDs, and (namespace, pod, container, resource, ids) held."""

    allocatable: dict[str, list[str]] = field(default_factory=dict)
    pods: list[tuple[str, str, str, str, list[str]]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    hold: threading.Event | None = None  # when set: every call waits for it (a kubelet slow to answer), up to 30 s


class _Servicer(pr_grpc.PodResourcesListerServicer):
    def __init__(self, state: PodResourcesState) -> None:
        self.state = state

    def GetAllocatableResources(self, request: Any, context: Any) -> Any:
        self.state.calls.append("GetAllocatableResources")
        if self.state.hold is not None:
            self.state.hold.wait(30)
        return pr_pb2.AllocatableResourcesResponse(
            devices=[pr_pb2.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in self.state.allocatable.items()]
        )

    def List(self, request: Any, context: Any) -> Any:
        self.state.calls.append("List")
        pods = [
            pr_pb2.PodResources(
                name=pod, namespace=ns,
                containers=[pr_pb2.ContainerResources(name=container, devices=[pr_pb2.ContainerDevices(resource_name=resource, device_ids=ids)])],
            )
            for ns, pod, container, resource, ids in self.state.pods
        ]  # fmt: skip
        return pr_pb2.ListPodResourcesResponse(pod_resources=pods)


@contextmanager
def pod_resources_server(socket_path: Path, state: PodResourcesState) -> Iterator[PodResourcesState]:
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    pr_grpc.add_PodResourcesListerServicer_to_server(_Servicer(state), server)
    assert server.add_insecure_port(f"unix://{socket_path}") != 0
    server.start()
    try:
        yield state
    finally:
        server.stop(0).wait()


def bind_socket(path: Path) -> socket.socket:
    """A real listening unix socket at `path` (a device plugin's or a registration socket)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(1)
    return sock


def write_checkpoint(kubelet_dir: Path, registered: Mapping[str, Sequence[str]], entries: Sequence[tuple[str, str, str, Sequence[str]]] = ()) -> Path:
    """kubelet_internal_checkpoint as the kubelet writes it (DeviceIDs keyed by NUMA node)."""
    data = {
        "Data": {
            "PodDeviceEntries": [
                {"PodUID": uid, "ContainerName": container, "ResourceName": resource, "DeviceIDs": {"0": list(ids)}, "AllocResp": ""}
                for uid, container, resource, ids in entries
            ],
            "RegisteredDevices": {k: list(v) for k, v in registered.items()},
        },
        "Checksum": 1,
    }
    path = kubelet_dir / "device-plugins" / "kubelet_internal_checkpoint"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


@contextmanager
def other_driver(kubelet_dir: Path, driver: str = "gpu.nvidia.com") -> Iterator[Path]:
    """The vendor's own driver: registered with the helper's default socket name, serving its own endpoint."""
    socket = kubelet_dir / "plugins_registry" / f"{driver}-reg.sock"
    servicer = RegistrationServicer(driver, str(kubelet_dir / "plugins" / driver / "dra.sock"))
    server = UnixServer(socket, lambda s: reg_grpc.add_RegistrationServicer_to_server(servicer, s), 2, "other")
    server.start()
    try:
        yield socket
    finally:
        server.stop()
