"""NVML errors name the code symbolically and hint at a fix, even where pynvml has no text."""

from __future__ import annotations

import pynvml
import pytest

from dra_driver_nvidia import nvml
from dra_driver_nvidia.nvml import NvmlError


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
