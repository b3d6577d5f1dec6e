"""Loading NVML from a host driver root mounted into the container (no LD_LIBRARY_PATH)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from dra_driver.common.errors import BackendUnavailable
from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.backend.interface import AllocatedDevice, BackendSettings, ClaimRef, Mount
from dra_driver_nvidia import nvml
from dra_driver_nvidia.simulated import fake_driver_root, fake_nvml
from dra_driver_nvidia.backend import NvidiaBackend
from dra_driver_nvidia.profile import parse_section


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


# ---- from_host with a driver root: the loaded library object is the simulated NVML --------------


@pytest.fixture
def host_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, fake_nvml.FakeNvmlLibrary]]:
    """A driver root holding libnvidia-ml.so.1 whose load (ctypes.CDLL, the lowest layer) gives the simulated
    NVML of dgx-h100, plus that profile's driver files."""
    section = parse_section(load_profile("dgx-h100").sections["nvidia"])
    library = fake_nvml.FakeNvmlLibrary(section)
    root = fake_driver_root.build(tmp_path / "driver", section.driverVersion)
    lib = root / "usr/lib64" / nvml.LIBRARY_NAME
    lib.parent.mkdir(parents=True, exist_ok=True)
    lib.write_bytes(b"")
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(nvml.ctypes, "CDLL", lambda path: library)
    yield root, library
    fake_nvml.install(None)


def _claim_mounts(backend: NvidiaBackend) -> list[Mount]:
    node = backend.settings.node_name
    prepared = backend.prepare(ClaimRef("ns", "c", "uid-1"), [AllocatedDevice(request="gpu", pool=node, device="gpu-0")])
    backend.unprepare(ClaimRef("ns", "c", "uid-1"), prepared.state)
    return prepared.claim_edits.mounts


def _open_host(root: Path, tmp_path: Path) -> NvidiaBackend:
    return NvidiaBackend.from_host(BackendSettings(driver_root=root, host_driver_root=Path("/run/nvidia/driver"), state_dir=tmp_path / "state"))


def test_host_backend_finds_the_driver_files_of_the_version_nvml_reports(host_root: tuple[Path, fake_nvml.FakeNvmlLibrary], tmp_path: Path) -> None:
    root, library = host_root
    backend = _open_host(root, tmp_path)
    try:
        mounts = {m.container_path: m.host_path for m in _claim_mounts(backend)}
    finally:
        backend.close()
    version = library.section.driverVersion
    assert any(path.endswith(f".so.{version}") for path in mounts)
    assert all(host.startswith("/run/nvidia/driver/") for host in mounts.values())  # host paths translated


def test_unreadable_driver_version_is_a_plain_unavailable(host_root: tuple[Path, fake_nvml.FakeNvmlLibrary], tmp_path: Path) -> None:
    """Discovery publishes driverVersion and every spec mounts files named by it: no version, no backend
    (it used to start with no driver files and then fail in discovery)."""
    root, library = host_root
    library.fail("nvmlSystemGetDriverVersion", "NVML_ERROR_UNKNOWN")
    with pytest.raises(BackendUnavailable, match="NVML reports no driver version") as info:
        _open_host(root, tmp_path)
    assert "nvidia-smi" in str(info.value)


def test_the_time_slice_stand_in_keeps_its_state_in_the_root_it_was_renamed_to(tmp_path: Path) -> None:
    """The simulated root is built in a temp directory and renamed into place: the nvidia-smi stand-in must write
    under the final root, never recreate the temp path (which it did, world-writable under umask 000)."""
    import os
    import subprocess

    from dra_driver.simulation import node as sim_node

    final = sim_node.build_shared(tmp_path, "nvidia-driver-root-1.2.3", lambda d: fake_driver_root.build(d, "1.2.3"))
    uuid = "GPU-a76e89c2-a727-5fc5-a58a-8e6912ffd392"
    old_umask = os.umask(0)
    try:
        subprocess.run([str(final / "usr/bin/nvidia-smi"), "compute-policy", "-i", uuid, "--set-timeslice=2"], check=True, capture_output=True)
    finally:
        os.umask(old_umask)
    assert (final / fake_driver_root.TIMESLICE_DIR / uuid).read_text() == "2\n"
    assert [p.name for p in tmp_path.iterdir()] == [final.name]
    assert not [p for p in final.rglob("*") if not p.is_symlink() and p.lstat().st_mode & 0o022 and not p.is_char_device()]
