"""The generated descriptors carry exactly the kubelet's wire identity (dra-api-facts.md 1, 2)."""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import FieldDescriptor

from dra_driver.api.dra.v1 import api_pb2 as v1
from dra_driver.api.dra.v1beta1 import api_pb2 as v1beta1
from dra_driver.api.drahealth.v1 import api_pb2 as health_v1
from dra_driver.api.drahealth.v1alpha1 import api_pb2 as health
from dra_driver.api.pluginregistration.v1 import api_pb2 as reg


def fields_of(message) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}


def method_paths(module, service: str) -> set[str]:
    svc = module.DESCRIPTOR.services_by_name[service]
    return {f"/{svc.full_name}/{m.name}" for m in svc.methods}


def test_registration_identity():
    assert reg.DESCRIPTOR.package == "pluginregistration"
    assert method_paths(reg, "Registration") == {
        "/pluginregistration.Registration/GetInfo",
        "/pluginregistration.Registration/NotifyRegistrationStatus",
    }
    assert fields_of(reg.PluginInfo) == {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4}
    assert reg.PluginInfo.DESCRIPTOR.fields_by_name["supported_versions"].is_repeated
    assert fields_of(reg.RegistrationStatus) == {"plugin_registered": 1, "error": 2}
    assert fields_of(reg.InfoRequest) == {} and fields_of(reg.RegistrationStatusResponse) == {}


def test_dra_identity_both_versions():
    for module, version in ((v1, "v1"), (v1beta1, "v1beta1")):
        package = f"k8s.io.kubelet.pkg.apis.dra.{version}"
        assert module.DESCRIPTOR.package == package
        assert method_paths(module, "DRAPlugin") == {
            f"/{package}.DRAPlugin/NodePrepareResources",
            f"/{package}.DRAPlugin/NodeUnprepareResources",
        }
        assert fields_of(module.NodePrepareResourcesRequest) == {"claims": 1}
        assert fields_of(module.NodeUnprepareResourcesRequest) == {"claims": 1}
        assert fields_of(module.Claim) == {"namespace": 1, "uid": 2, "name": 3}
        assert fields_of(module.NodePrepareResourceResponse) == {"devices": 1, "error": 2}
        assert fields_of(module.NodeUnprepareResourceResponse) == {"error": 1}
        for response, value in (
            ("NodePrepareResourcesResponse", "NodePrepareResourceResponse"),
            ("NodeUnprepareResourcesResponse", "NodeUnprepareResourceResponse"),
        ):
            claims = getattr(module, response).DESCRIPTOR.fields_by_name["claims"]
            assert claims.number == 1 and claims.message_type.GetOptions().map_entry
            key, val = claims.message_type.fields_by_name["key"], claims.message_type.fields_by_name["value"]
            assert key.type == FieldDescriptor.TYPE_STRING and val.message_type.full_name == f"{package}.{value}"


def test_device_share_id_only_in_v1_and_optional():
    base = {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4}
    assert fields_of(v1beta1.Device) == base
    assert fields_of(v1.Device) == {**base, "share_id": 5}
    share = v1.Device.DESCRIPTOR.fields_by_name["share_id"]
    assert share.has_presence  # proto3 `optional`: unset is distinguishable from ""
    device = v1.Device()
    assert not device.HasField("share_id")


@pytest.mark.parametrize(("module", "package"), [(health, "v1alpha1"), (health_v1, "v1")])
def test_health_identity(module, package):
    """v1alpha1 (1.35-1.39 kubelets) and v1 (1.37 on): the same messages, field 5 `message` included (1.36 on)."""
    assert module.DESCRIPTOR.package == package
    svc = module.DESCRIPTOR.services_by_name["DRAResourceHealth"]
    method = svc.methods_by_name["NodeWatchResources"]
    assert f"/{svc.full_name}/{method.name}" == f"/{package}.DRAResourceHealth/NodeWatchResources"
    assert method.server_streaming and not method.client_streaming
    assert fields_of(module.NodeWatchResourcesRequest) == {}
    assert fields_of(module.NodeWatchResourcesResponse) == {"devices": 1}
    assert fields_of(module.DeviceIdentifier) == {"pool_name": 1, "device_name": 2}
    assert fields_of(module.DeviceHealth) == {"device": 1, "health": 2, "last_updated_time": 3, "health_check_timeout_seconds": 4, "message": 5}
    assert module.DeviceHealth.DESCRIPTOR.fields_by_name["last_updated_time"].type == FieldDescriptor.TYPE_INT64
    assert module.DeviceHealth.DESCRIPTOR.fields_by_name["message"].type == FieldDescriptor.TYPE_STRING
    assert {v.name: v.number for v in module.DESCRIPTOR.enum_types_by_name["HealthStatus"].values} == {"UNKNOWN": 0, "HEALTHY": 1, "UNHEALTHY": 2}


def test_descriptor_files_are_distinct():
    names = {m.DESCRIPTOR.name for m in (v1, v1beta1, health, reg)}
    assert len(names) == 4
