"""The kubelet's side of the plugin protocol, for `demo`, benchmarks and tests.

It does what the kubelet does (kubelet plugin manager and DRA registration, docs/sources.md): dial the
registration socket, GetInfo, pick the first supported DRA service in the
plugin's order, connect to the advertised endpoint, NotifyRegistrationStatus;
then NodePrepareResources / NodeUnprepareResources with the chosen version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

from dra_driver.api.dra.v1 import api_pb2 as v1_pb2
from dra_driver.api.dra.v1 import api_pb2_grpc as v1_grpc
from dra_driver.api.dra.v1beta1 import api_pb2 as v1beta1_pb2
from dra_driver.api.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from dra_driver.api.drahealth.v1 import api_pb2_grpc as health_v1_grpc
from dra_driver.api.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from dra_driver.api.pluginregistration.v1 import api_pb2 as reg_pb2
from dra_driver.api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from dra_driver.common.errors import DraError
from dra_driver.node.plugin.health import HEALTH_SERVICES
from dra_driver.backend.interface import ClaimRef

KUBELET_SERVICES: dict[str, tuple[ModuleType, Any]] = {
    "v1.DRAPlugin": (v1_pb2, v1_grpc.DRAPluginStub),
    "v1beta1.DRAPlugin": (v1beta1_pb2, v1beta1_grpc.DRAPluginStub),
}
HEALTH_STUBS: dict[str, Any] = {
    "v1.DRAResourceHealth": health_v1_grpc.DRAResourceHealthStub,
    "v1alpha1.DRAResourceHealth": health_grpc.DRAResourceHealthStub,
}
CALL_TIMEOUT_S = 45.0  # the kubelet's per-call deadline


class RegistrationRejected(DraError):
    pass


@dataclass
class PluginConnection:
    info: Any  # PluginInfo
    service: str  # "v1.DRAPlugin" or "v1beta1.DRAPlugin"
    pb2: ModuleType
    stub: Any
    channel: grpc.Channel

    def prepare(self, claims: Sequence[ClaimRef], timeout: float = CALL_TIMEOUT_S) -> Any:
        request = self.pb2.NodePrepareResourcesRequest(claims=[_claim(self.pb2, c) for c in claims])
        return self.stub.NodePrepareResources(request, timeout=timeout)

    def unprepare(self, claims: Sequence[ClaimRef], timeout: float = CALL_TIMEOUT_S) -> Any:
        request = self.pb2.NodeUnprepareResourcesRequest(claims=[_claim(self.pb2, c) for c in claims])
        return self.stub.NodeUnprepareResources(request, timeout=timeout)

    def watch_health(self, service: str = "v1alpha1.DRAResourceHealth") -> Any:
        """Open the health stream of one package, as a kubelet of that generation does."""
        if service not in self.info.supported_versions:
            raise RegistrationRejected(f"the plugin does not advertise {service}: {list(self.info.supported_versions)}")
        pb, _ = HEALTH_SERVICES[service]
        stub = HEALTH_STUBS[service](self.channel)
        return stub.NodeWatchResources(pb.NodeWatchResourcesRequest())

    def close(self) -> None:
        self.channel.close()


def _claim(pb2: ModuleType, ref: ClaimRef) -> Any:
    return pb2.Claim(namespace=ref.namespace, uid=ref.uid, name=ref.name)


def register(registration_socket: Path, only: str | None = None, timeout: float = 10.0) -> PluginConnection:
    """Register a plugin like the kubelet; `only` restricts the kubelet's own service list (e.g. v1beta1)."""
    known = [only] if only else list(KUBELET_SERVICES)
    with grpc.insecure_channel(f"unix://{registration_socket}") as reg_channel:
        grpc.channel_ready_future(reg_channel).result(timeout=timeout)
        reg = reg_grpc.RegistrationStub(reg_channel)
        info = reg.GetInfo(reg_pb2.InfoRequest(), timeout=1.0)
        problem = _validate(info, known)
        if problem:
            reg.NotifyRegistrationStatus(reg_pb2.RegistrationStatus(plugin_registered=False, error=problem), timeout=5.0)
            raise RegistrationRejected(problem)
        service = next(v for v in info.supported_versions if v in known)
        endpoint = info.endpoint or str(registration_socket)
        pb2, stub_class = KUBELET_SERVICES[service]
        channel = grpc.insecure_channel(f"unix://{endpoint}")
        grpc.channel_ready_future(channel).result(timeout=timeout)
        reg.NotifyRegistrationStatus(reg_pb2.RegistrationStatus(plugin_registered=True), timeout=5.0)
    return PluginConnection(info=info, service=service, pb2=pb2, stub=stub_class(channel), channel=channel)


def _validate(info: Any, known: Sequence[str]) -> str:
    if info.type != "DRAPlugin":
        return f"unknown plugin type {info.type!r}"
    if not info.supported_versions:
        return "plugin advertises no supported versions"
    if not any(v in known for v in info.supported_versions):
        return f"none of the versions {list(info.supported_versions)} is supported (kubelet knows {list(known)})"
    return ""
