"""NVML errors name the code symbolically and hint at a fix; profile `failures` keys are checked."""

from __future__ import annotations

import pynvml
import pytest

from dra_driver.common.errors import ProfileError
from dra_driver_nvidia import nvml
from dra_driver_nvidia.nvml import NvmlError

from .conftest import OpenBackend, profile_section


def _raise(code: int) -> None:
    raise pynvml.NVMLError(code)


@pytest.mark.parametrize(
    ("code", "name", "hint"),
    [
        (pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, "NVML_ERROR_INSUFFICIENT_RESOURCES=23", "overlaps an existing GPU instance"),
        (pynvml.NVML_ERROR_IN_USE, "NVML_ERROR_IN_USE=19", "still use the GPU"),
        (pynvml.NVML_ERROR_RESET_REQUIRED, "NVML_ERROR_RESET_REQUIRED=16", "GPU reset"),
    ],
)
def test_error_names_code_and_hint(code: int, name: str, hint: str) -> None:
    with pytest.raises(NvmlError) as caught:
        nvml.call(_raise, code)
    message = str(caught.value)
    assert message.startswith("_raise: ")
    assert name in message and hint in message
    assert "NVML Error with code" not in message
    assert caught.value.code == code


def test_unknown_code_still_readable() -> None:
    error = NvmlError("nvmlFoo", 4242, "weird")
    assert "NVML_ERROR_4242=4242" in str(error)


def test_known_text_is_kept() -> None:
    with pytest.raises(NvmlError) as caught:
        nvml.call(_raise, pynvml.NVML_ERROR_NOT_SUPPORTED)
    assert "Not Supported" in str(caught.value) and "NVML_ERROR_NOT_SUPPORTED=3" in str(caught.value)


@pytest.mark.parametrize(
    ("where", "symbol", "suggested"),
    [
        ("system", "nvmlDeviceGetCount", "nvmlDeviceGetCount_v2"),
        ("gpu", "nvmlDeviceGetGpuInstanceProfileInfo", "nvmlDeviceGetGpuInstanceProfileInfoV"),
    ],
)
def test_unknown_failure_symbol_is_a_profile_error(open_backend: OpenBackend, where: str, symbol: str, suggested: str) -> None:
    section = profile_section("dgx-h100")
    target = section if where == "system" else section["gpus"][2]
    target["failures"] = {symbol: "UNKNOWN"}
    with pytest.raises(ProfileError) as caught:
        open_backend(section)
    message = str(caught.value)
    path = "nvidia.failures" if where == "system" else "nvidia.gpus[2].failures"
    assert f"{path}.{symbol}: not a simulated NVML symbol" in message
    assert f"did you mean {suggested}" in message
    assert "nvmlDeviceGetName" in message  # lists the valid names


def test_unknown_failure_error_name_is_a_profile_error(open_backend: OpenBackend) -> None:
    section = profile_section("l4")
    section["gpus"][0]["failures"] = {"nvmlDeviceGetName": "GPU_GONE"}
    with pytest.raises(ProfileError, match=r"nvidia.gpus\[0\].failures.nvmlDeviceGetName: unknown NVML error 'GPU_GONE'"):
        open_backend(section)


def test_valid_failure_symbol_takes_effect(open_backend: OpenBackend) -> None:
    section = profile_section("dgx-h100")
    section["gpus"][1]["failures"] = {"nvmlDeviceGetUUID": "GPU_IS_LOST"}
    names = [d.name for d in open_backend(section).discover().devices]
    assert "gpu-1" not in names and len(names) == 7
