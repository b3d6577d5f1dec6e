"""Loading NVML from a host driver root mounted into the container (no LD_LIBRARY_PATH)."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from dra_driver.errors import BackendUnavailable
from dra_driver.vendor import BackendSettings
from dra_driver_nvidia import nvml
from dra_driver_nvidia.backend import NvidiaBackend


@pytest.fixture
def no_library_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pynvml, "nvmlLib", None)


def test_library_is_found_in_distribution_layouts(tmp_path: Path) -> None:
    assert nvml.find_library(tmp_path) is None
    target = tmp_path / "usr/lib/x86_64-linux-gnu" / nvml.LIBRARY_NAME
    target.parent.mkdir(parents=True)
    target.write_bytes(b"")
    assert nvml.find_library(tmp_path) == target


def test_missing_library_under_driver_root_is_a_plain_unavailable(tmp_path: Path, no_library_loaded: None) -> None:
    with pytest.raises(BackendUnavailable) as info:
        NvidiaBackend.from_host(BackendSettings(driver_root=tmp_path))
    assert f"not found under driver root {tmp_path}" in str(info.value) and "--driver-root" in str(info.value)


def test_unloadable_library_is_a_plain_unavailable(tmp_path: Path, no_library_loaded: None) -> None:
    broken = tmp_path / "usr/lib64" / nvml.LIBRARY_NAME
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"not an ELF file")
    with pytest.raises(BackendUnavailable, match="cannot load"):
        NvidiaBackend.from_host(BackendSettings(driver_root=tmp_path))
    assert pynvml.nvmlLib is None  # nothing half-loaded left behind


def test_default_root_leaves_loading_to_pynvml(no_library_loaded: None) -> None:
    nvml.load_library(Path("/"))
    assert pynvml.nvmlLib is None
