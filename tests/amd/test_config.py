"""Opaque configuration: the empty upstream GpuConfig, unknown fields refused by name."""

from __future__ import annotations

import pytest

from dra_driver.common.errors import ConfigError


def test_accepts_upstream_config(open_backend):
    backend = open_backend("mi210")
    config = backend.validate_config({"apiVersion": "gpu.resource.amd.com/v1alpha1", "kind": "GpuConfig"})
    assert config.model_dump() == {"apiVersion": "gpu.resource.amd.com/v1alpha1", "kind": "GpuConfig"}
    assert backend.validate_config({}).kind == "GpuConfig"


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}}, r"sharing: unknown field"),
        (
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"},
            r"apiVersion: 'resource.nvidia.com/v1beta1' is not supported; use 'gpu.resource.amd.com/v1alpha1'",
        ),
        ({"apiVersion": "gpu.resource.amd.com/v1alpha1", "kind": "MigDeviceConfig"}, r"kind: 'MigDeviceConfig' is not supported"),
        (["not", "a", "mapping"], r"must be an object"),
    ],
)
def test_rejects_with_the_field_named(open_backend, parameters, message):
    with pytest.raises(ConfigError, match=message):
        open_backend("mi210").validate_config(parameters)
