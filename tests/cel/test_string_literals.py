"""The string literals migrate and template write into selectors read back as the value they were written from."""

from __future__ import annotations

import pytest

from dra_driver.cel import cel_device, compile_selector
from dra_driver.cel.literals import cel_string


@pytest.mark.parametrize(
    "value",
    ["NVIDIA H100 80GB HBM3", 'say "hi"', "back\\slash", "two\nlines", "tab\there", "bell\x07", "é", "emoji 😀", "'single'", "${x}"],
)
def test_a_written_literal_reads_back_as_its_value(value: str) -> None:
    device = cel_device("gpu.nvidia.com", {"name": "gpu-0", "attributes": {"productName": {"string": value}}})
    assert compile_selector(f'device.attributes["gpu.nvidia.com"].productName == {cel_string(value)}').evaluate(device) is True
    other = cel_device("gpu.nvidia.com", {"name": "gpu-1", "attributes": {"productName": {"string": value + "x"}}})
    assert compile_selector(f'device.attributes["gpu.nvidia.com"].productName == {cel_string(value)}').evaluate(other) is False
