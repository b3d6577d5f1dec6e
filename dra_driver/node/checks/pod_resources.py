"""A client of the kubelet's PodResources v1 API (`v1.PodResourcesLister` on <kubelet dir>/pod-resources/kubelet.sock).

Only device-plugin devices are read: `GetAllocatableResources` names every device a device plugin
advertises, `List` the ones each pod's containers hold. Every answer is untrusted input: resource names
and device IDs are kept as strings, bounded, and never used to build a path.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from dra_driver.api.podresources.v1 import api_pb2 as pr_pb2
from dra_driver.api.podresources.v1 import api_pb2_grpc as pr_grpc
from dra_driver.common.errors import DraError

DEFAULT_SOCKET_NAME = Path("pod-resources") / "kubelet.sock"
CALL_TIMEOUT_S = 2.0
_MAX_ID_CHARS = 256  # a device-plugin ID longer than this is not one we could match


class PodResourcesUnavailable(DraError):
    """The PodResources socket is missing or does not answer; the message names the socket and the cause."""


@dataclass(frozen=True)
class Holder:
    """One device-plugin device held by one container of a pod."""

    resource: str
    device_id: str
    namespace: str
    pod: str
    container: str

    def describe(self) -> str:
        return f"pod {self.namespace}/{self.pod} (container {self.container}, {self.resource} {self.device_id})"


@dataclass
class PodResourcesView:
    allocatable: dict[str, set[str]] = field(default_factory=dict)  # resource name -> device IDs
    holders: list[Holder] = field(default_factory=list)


def default_socket(kubelet_dir: Path) -> Path:
    return kubelet_dir / DEFAULT_SOCKET_NAME


class PodResourcesClient:
    """One channel to the kubelet's PodResources socket, kept open (opening one costs more than the call);
    a failed call closes it and the next call dials again."""

    def __init__(self, socket: Path, timeout: float = CALL_TIMEOUT_S) -> None:
        self.socket = socket
        self._timeout = timeout
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None

    def view(self, allocatable: bool = True) -> PodResourcesView:
        """List (and with `allocatable`, GetAllocatableResources); PodResourcesUnavailable naming the socket and the cause."""
        if not self.socket.exists():
            self.close()
            raise PodResourcesUnavailable(
                f"kubelet PodResources socket {self.socket} does not exist (mount <kubelet dir>/pod-resources into the driver's pod)"
            )
        stub = pr_grpc.PodResourcesListerStub(self._open())
        view = PodResourcesView()
        try:
            if allocatable:
                answer = stub.GetAllocatableResources(pr_pb2.AllocatableResourcesRequest(), timeout=self._timeout)
                for devices in answer.devices:
                    view.allocatable.setdefault(devices.resource_name, set()).update(_ids(devices.device_ids))
            listed = stub.List(pr_pb2.ListPodResourcesRequest(), timeout=self._timeout)
        except grpc.RpcError as exc:
            self.close()
            raise PodResourcesUnavailable(f"kubelet PodResources socket {self.socket}: {exc.code().name} {exc.details() or ''}".rstrip()) from exc
        for pod in listed.pod_resources:
            for container in pod.containers:
                for devices in container.devices:
                    view.holders.extend(Holder(devices.resource_name, i, pod.namespace, pod.name, container.name) for i in _ids(devices.device_ids))
        return view

    def _open(self) -> grpc.Channel:
        with self._lock:
            if self._channel is None:
                self._channel = grpc.insecure_channel(f"unix://{self.socket.absolute()}")
            return self._channel

    def close(self) -> None:
        with self._lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()


def read_pod_resources(socket: Path, timeout: float = CALL_TIMEOUT_S, allocatable: bool = True) -> PodResourcesView:
    """One-shot: dial, ask, close."""
    client = PodResourcesClient(socket, timeout)
    try:
        return client.view(allocatable)
    finally:
        client.close()


def _ids(values: Iterable[object]) -> list[str]:
    return [str(v) for v in values if 0 < len(str(v)) <= _MAX_ID_CHARS]
