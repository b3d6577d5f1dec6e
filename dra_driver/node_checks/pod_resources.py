"""A client of the kubelet's PodResources v1 API (`v1.PodResourcesLister` on <kubelet dir>/pod-resources/kubelet.sock).

Only device-plugin devices are read: `GetAllocatableResources` names every device a device plugin
advertises, `List` the ones each pod's containers hold. Every answer is untrusted input: resource names
and device IDs are kept as strings, bounded, and never used to build a path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import grpc

from dra_driver.api.podresources.v1 import api_pb2 as pr_pb2
from dra_driver.api.podresources.v1 import api_pb2_grpc as pr_grpc
from dra_driver.errors import DraError

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


def read_pod_resources(socket: Path, timeout: float = CALL_TIMEOUT_S, allocatable: bool = True) -> PodResourcesView:
    """Both calls on one channel; `allocatable=False` asks only List (the per-prepare check)."""
    if not socket.exists():
        raise PodResourcesUnavailable(f"kubelet PodResources socket {socket} does not exist (mount <kubelet dir>/pod-resources into the driver's pod)")
    view = PodResourcesView()
    try:
        with grpc.insecure_channel(f"unix://{socket.absolute()}") as channel:
            stub = pr_grpc.PodResourcesListerStub(channel)
            if allocatable:
                answer = stub.GetAllocatableResources(pr_pb2.AllocatableResourcesRequest(), timeout=timeout)
                for devices in answer.devices:
                    view.allocatable.setdefault(devices.resource_name, set()).update(_ids(devices.device_ids))
            listed = stub.List(pr_pb2.ListPodResourcesRequest(), timeout=timeout)
    except grpc.RpcError as exc:
        raise PodResourcesUnavailable(f"kubelet PodResources socket {socket}: {exc.code().name} {exc.details() or ''}".rstrip()) from exc
    for pod in listed.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                view.holders.extend(Holder(devices.resource_name, i, pod.namespace, pod.name, container.name) for i in _ids(devices.device_ids))
    return view


def _ids(values: object) -> list[str]:
    return [str(v) for v in values if 0 < len(str(v)) <= _MAX_ID_CHARS]  # type: ignore[attr-defined]
