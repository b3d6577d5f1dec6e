"""The kubelet plugin-watcher Registration service (package `pluginregistration`)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import grpc

from dra_driver.api.pluginregistration.v1 import api_pb2 as reg_pb2
from dra_driver.api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from dra_driver.common.logs import fields
from dra_driver.node.plugin.health import HEALTH_SERVICES

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
# The kubelet takes the first DRA service it knows, in this order: v1 first (kubelet cm/dra/plugin/registration.go);
# it skips the health entries for that choice and picks v1 health over v1alpha1 when it knows v1 (1.37 on).
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin", *HEALTH_SERVICES)


@dataclass(frozen=True)
class RegistrationStatus:
    registered: bool
    error: str


class RegistrationServicer(reg_grpc.RegistrationServicer):
    def __init__(self, driver: str, endpoint: str) -> None:
        self.driver = driver
        self.endpoint = endpoint  # absolute path of the DRA socket, as the kubelet sees it
        self._status: RegistrationStatus | None = None
        self._changed = threading.Condition()

    def GetInfo(self, request: reg_pb2.InfoRequest, context: grpc.ServicerContext) -> reg_pb2.PluginInfo:
        return reg_pb2.PluginInfo(type=PLUGIN_TYPE, name=self.driver, endpoint=self.endpoint, supported_versions=list(SUPPORTED_VERSIONS))

    def NotifyRegistrationStatus(self, request: reg_pb2.RegistrationStatus, context: grpc.ServicerContext) -> reg_pb2.RegistrationStatusResponse:
        status = RegistrationStatus(request.plugin_registered, request.error)
        with self._changed:
            self._status = status
            self._changed.notify_all()
        if status.registered:
            log.info("registered with the kubelet", extra=fields(driver=self.driver, endpoint=self.endpoint))
            return reg_pb2.RegistrationStatusResponse()
        log.error("kubelet rejected the registration", extra=fields(driver=self.driver, error=status.error))
        context.abort(grpc.StatusCode.UNKNOWN, f"registration of {self.driver} failed: {status.error}")
        raise AssertionError("unreachable")  # abort() raises

    def forget(self) -> None:
        """A new registration socket: the kubelet has to register this instance again."""
        with self._changed:
            self._status = None

    @property
    def status(self) -> RegistrationStatus | None:
        with self._changed:
            return self._status

    def wait_registered(self, timeout: float) -> RegistrationStatus | None:
        with self._changed:
            self._changed.wait_for(lambda: self._status is not None, timeout)
            return self._status
