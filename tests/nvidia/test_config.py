"""Opaque config compatible with resource.nvidia.com/v1beta1, and the sharing environment it produces."""

from __future__ import annotations

import pytest

from dra_driver.common.errors import ConfigError
from dra_driver.backend.interface import AllocatedDevice, ClaimRef
from dra_driver_nvidia.config import GpuConfig, MigDeviceConfig, validate_config

from .conftest import OpenBackend

API = "resource.nvidia.com/v1beta1"


def test_upstream_gpu_config_with_time_slicing() -> None:
    config = validate_config(
        {"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}
    )
    assert isinstance(config, GpuConfig)
    assert config.sharing is not None and config.sharing.timeSlicingConfig is not None
    assert config.sharing.timeSlicingConfig.interval == "Long"


def test_upstream_mig_config_with_mps() -> None:
    config = validate_config(
        {
            "apiVersion": API,
            "kind": "MigDeviceConfig",
            "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": "10Gi"}},
        }
    )
    assert isinstance(config, MigDeviceConfig)


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing", "timeslicingConfig": {}}}, "sharing.timeslicingConfig"),
        ({"apiVersion": API, "kind": "GpuConfig", "extra": 1}, "unknown field 'extra'"),
        ({"apiVersion": "resource.nvidia.com/v1", "kind": "GpuConfig"}, "apiVersion"),
        ({"apiVersion": API, "kind": "VfioDeviceConfig"}, "kind: 'VfioDeviceConfig' is not supported; use one of 'GpuConfig', 'MigDeviceConfig'"),
        ({"kind": "GpuConfig"}, "apiVersion: None is not supported; use 'resource.nvidia.com/v1beta1'"),  # no default: upstream requires it
        (["GpuConfig"], "must be an object with apiVersion"),
        ({"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "SpacePartitioning"}}, "sharing.strategy"),
        ({"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Forever"}}}, "interval"),
        (
            {"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 101}}},
            "defaultActiveThreadPercentage",
        ),
        (
            {"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "512Ki"}}},
            "1Mi minimum",
        ),
        (
            {
                "apiVersion": API,
                "kind": "GpuConfig",
                "sharing": {"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"0": "lots"}}},
            },
            "not a quantity",
        ),
        ({"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing", "mpsConfig": {}}}, "remove mpsConfig"),
    ],
)
def test_invalid_configs_name_the_field(parameters: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_config(parameters)


def _prepare_env(open_backend: OpenBackend, config: object) -> list[str]:
    backend = open_backend("dgx-h100")
    device = AllocatedDevice(request="gpu", pool="node-a", device="gpu-0", config=config)  # type: ignore[arg-type]
    return backend.prepare(ClaimRef("ns", "c", "u"), [device]).request_edits["gpu"].env


def test_mps_environment(open_backend: OpenBackend) -> None:
    config = validate_config(
        {
            "apiVersion": API,
            "kind": "GpuConfig",
            "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25, "defaultPinnedDeviceMemoryLimit": "2Gi"}},
        }
    )
    backend = open_backend("dgx-h100")
    prepared = backend.prepare(ClaimRef("ns", "c", "u"), [AllocatedDevice(request="gpu", pool="node-a", device="gpu-0", config=config)])
    assert prepared.request_edits["gpu"].env == ["NVIDIA_DRA_SHARING_STRATEGY=MPS"]
    env = prepared.claim_edits.env  # the claim's one MPS control daemon: every container of the claim is its client
    assert "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps" in env
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in env
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M" in env
    assert not any(e.startswith("NVIDIA_VISIBLE_DEVICES") for e in prepared.request_edits["gpu"].env)  # never per request


def test_time_slicing_environment(open_backend: OpenBackend) -> None:
    config = validate_config(
        {"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Medium"}}}
    )
    env = _prepare_env(open_backend, config)
    assert "NVIDIA_DRA_SHARING_STRATEGY=TimeSlicing" in env
    assert "NVIDIA_DRA_TIMESLICE_INTERVAL=2" in env


def test_backend_validate_config_is_the_same(open_backend: OpenBackend) -> None:
    with pytest.raises(ConfigError):
        open_backend("t4").validate_config({"apiVersion": API, "kind": "GpuConfig", "bogus": True})
