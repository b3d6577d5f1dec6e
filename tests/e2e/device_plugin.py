"""A small device plugin for the e2e tier, speaking the kubelet's real device-plugin API v1beta1.

It serves DevicePlugin on a unix socket in the kubelet's device-plugins directory, registers with the
kubelet's device manager (`kubelet.sock` there, `Registration.Register`), offers fixed device IDs through
ListAndWatch and records every Allocate the kubelet sends. Nothing of it is product code.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from tests.e2e.deviceplugin.v1beta1 import api_pb2 as dp
from tests.e2e.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc

API_VERSION = "v1beta1"


@dataclass
class StandInDevicePlugin(dp_grpc.DevicePluginServicer):
    directory: Path  # the kubelet's device-plugins directory as this process sees it
    resource: str  # "nvidia.com/gpu"
    device_ids: Sequence[str]
    socket_name: str = "e2e-nvidia-gpu.sock"  # the vendor is read from the name (docs/coexistence.md)
    allocated: list[list[str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _server: Any = None

    def GetDevicePluginOptions(self, request: Any, context: grpc.ServicerContext) -> Any:
        return dp.DevicePluginOptions()

    def ListAndWatch(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        yield dp.ListAndWatchResponse(devices=[dp.Device(ID=i, health="Healthy") for i in self.device_ids])
        while not self._stop.wait(1.0) and context.is_active():
            pass

    def GetPreferredAllocation(self, request: Any, context: grpc.ServicerContext) -> Any:
        return dp.PreferredAllocationResponse()

    def Allocate(self, request: Any, context: grpc.ServicerContext) -> Any:
        responses = []
        for container in request.container_requests:
            ids = list(container.devices_ids)
            self.allocated.append(ids)
            responses.append(dp.ContainerAllocateResponse(envs={"E2E_DEVICE_PLUGIN_IDS": ",".join(ids)}))
        return dp.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request: Any, context: grpc.ServicerContext) -> Any:
        return dp.PreStartContainerResponse()

    def start(self) -> None:
        socket = self.directory / self.socket_name
        socket.unlink(missing_ok=True)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        dp_grpc.add_DevicePluginServicer_to_server(self, self._server)
        self._server.add_insecure_port(f"unix://{socket}")
        self._server.start()
        with grpc.insecure_channel(f"unix://{self.directory / 'kubelet.sock'}") as channel:
            dp_grpc.RegistrationStub(channel).Register(
                dp.RegisterRequest(version=API_VERSION, endpoint=self.socket_name, resource_name=self.resource), timeout=10
            )

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.stop(grace=1).wait(5)
        (self.directory / self.socket_name).unlink(missing_ok=True)
