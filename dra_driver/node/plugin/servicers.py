"""DRAPlugin servicers for v1 and v1beta1: translate protobuf <-> PrepareService.

Both versions have the same messages except `Device.share_id` (v1 only), so
one class serves both, parameterised by the generated module.

Each call's deadline (the kubelet's 45 s) is handed down, less a margin for
sending the answer: claims not done by then get their own error, so the
kubelet always gets an answer it can use.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext
from types import ModuleType
from typing import Any

import grpc

from dra_driver.api.dra.v1 import api_pb2 as v1_pb2
from dra_driver.api.dra.v1 import api_pb2_grpc as v1_grpc
from dra_driver.api.dra.v1beta1 import api_pb2 as v1beta1_pb2
from dra_driver.api.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from dra_driver.node.checkpoint import CheckpointDevice
from dra_driver.node.metrics import Metrics
from dra_driver.node.plugin.prepare import PrepareService
from dra_driver.backend.interface import ClaimRef


class DraServicer:
    def __init__(self, service: PrepareService, pb2: ModuleType, version: str, metrics: Metrics | None) -> None:
        self._service = service
        self._pb2 = pb2
        self._version = version
        self._metrics = metrics
        self._has_share_id = "share_id" in pb2.Device.DESCRIPTOR.fields_by_name

    def _timed(self, method: str) -> AbstractContextManager[None]:
        if self._metrics is None:
            return nullcontext()
        return self._metrics.timed(self._service.driver, f"{self._version}/{method}")

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._timed("NodePrepareResources"):
            outcomes = self._service.prepare([_ref(c) for c in request.claims], answer_deadline(context))
            response = self._pb2.NodePrepareResourcesResponse()
            for uid, outcome in outcomes.items():
                entry = response.claims[uid]
                if outcome.error:
                    entry.error = outcome.error
                else:
                    entry.devices.extend(self._device(d) for d in outcome.devices)
            return response

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self._timed("NodeUnprepareResources"):
            errors = self._service.unprepare([_ref(c) for c in request.claims], answer_deadline(context))
            response = self._pb2.NodeUnprepareResourcesResponse()
            for uid, error in errors.items():
                response.claims[uid].error = error  # touching the key creates the (empty) entry
            return response

    def _device(self, device: CheckpointDevice) -> Any:
        message = self._pb2.Device(
            request_names=[device.request],
            pool_name=device.pool,
            device_name=device.device,
            cdi_device_ids=device.cdi_ids,
        )
        if device.share_id and self._has_share_id:
            message.share_id = device.share_id
        return message


# Time kept back from the caller's deadline to build and send the answer: a tenth, at most a second.
ANSWER_MARGIN_S = 1.0
# grpc reports a call without a deadline as one centuries away; beyond a day there is no deadline to keep.
_NO_DEADLINE_S = 86400.0


def answer_deadline(context: grpc.ServicerContext) -> float | None:
    """When (time.monotonic()) the answer must be ready for the caller to get it; None without a deadline."""
    remaining = context.time_remaining()
    if remaining is None or remaining > _NO_DEADLINE_S:
        return None
    return time.monotonic() + remaining - min(ANSWER_MARGIN_S, remaining / 10)


def _ref(claim: Any) -> ClaimRef:
    return ClaimRef(namespace=claim.namespace, name=claim.name, uid=claim.uid)


class V1Servicer(DraServicer, v1_grpc.DRAPluginServicer):
    def __init__(self, service: PrepareService, metrics: Metrics | None = None) -> None:
        super().__init__(service, v1_pb2, "v1", metrics)


class V1Beta1Servicer(DraServicer, v1beta1_grpc.DRAPluginServicer):
    def __init__(self, service: PrepareService, metrics: Metrics | None = None) -> None:
        super().__init__(service, v1beta1_pb2, "v1beta1", metrics)


def add_dra_servicers(server: grpc.Server, service: PrepareService, metrics: Metrics | None) -> None:
    v1_grpc.add_DRAPluginServicer_to_server(V1Servicer(service, metrics), server)
    v1beta1_grpc.add_DRAPluginServicer_to_server(V1Beta1Servicer(service, metrics), server)
