"""Driver-file discovery under a driver root, host path translation, and the claim-level CDI edits it gives."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dra_driver.backend.interface import AllocatedDevice, ClaimRef
from dra_driver_nvidia import driver_files, ldcache
from dra_driver_nvidia.simulated import fake_driver_root
from dra_driver_nvidia.config import validate_config

from .conftest import OpenBackend

VERSION = "580.95.05"
LIB = "/usr/lib/x86_64-linux-gnu"
# The linker names (libcuda.so, libnvidia-ml.so) are in the cache too, as on a real H100 host.
EXPECTED_SONAMES = {
    f"{LIB}/libcuda.so.{VERSION}": ("libcuda.so", "libcuda.so.1"),
    f"{LIB}/libnvidia-ml.so.{VERSION}": ("libnvidia-ml.so", "libnvidia-ml.so.1"),
    f"{LIB}/libnvidia-gpucomp.so.{VERSION}": (),  # its own soname
}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return fake_driver_root.build(tmp_path / "r", VERSION)


def test_finds_the_versioned_libraries_the_cache_lists_and_nothing_else(root: Path) -> None:
    found = driver_files.discover(root, VERSION)
    paths = {lib.path: lib.sonames for lib in found.libraries}
    assert len(paths) == len(fake_driver_root.LIBRARIES)
    for path, sonames in EXPECTED_SONAMES.items():
        assert paths[path] == sonames
    assert not any("i386" in p or "1.0.0" in p or "libc.so" in p for p in paths)  # 32-bit, stale version, not the driver's


def test_finds_binaries_firmware_and_sockets(root: Path) -> None:
    found = driver_files.discover(root, VERSION)
    assert found.binaries == [f"/usr/bin/{name}" for name in driver_files.BINARIES]
    assert found.firmware == [f"/lib/firmware/nvidia/{VERSION}/{name}" for name in fake_driver_root.FIRMWARE]
    assert found.sockets == ["/var/run/nvidia-persistenced/socket", "/var/run/nvidia-fabricmanager/socket"]


def test_another_driver_version_finds_no_libraries_or_firmware(root: Path) -> None:
    found = driver_files.discover(root, "999.1.2")
    assert found.libraries == [] and found.firmware == []
    assert found.binaries  # binaries are not versioned by name


def test_host_paths_are_translated_and_container_paths_stay_inside(root: Path) -> None:
    found = driver_files.discover(root, VERSION, host_root=Path("/run/nvidia/driver"))
    edits = driver_files.claim_edits(found, hook_path=None)
    smi = next(m for m in edits.mounts if m.container_path == "/usr/bin/nvidia-smi")
    assert smi.host_path == "/run/nvidia/driver/usr/bin/nvidia-smi"
    assert all(m.host_path.startswith("/run/nvidia/driver/") and not m.container_path.startswith("/run/") for m in edits.mounts)


def test_without_a_cache_the_library_dirs_and_soname_links_are_used(root: Path) -> None:
    (root / "etc/ld.so.cache").unlink()
    found = driver_files.discover(root, VERSION)
    paths = {lib.path: lib.sonames for lib in found.libraries}
    assert paths[f"{LIB}/libcuda.so.{VERSION}"] == ("libcuda.so.1",)
    assert len(paths) == len(fake_driver_root.LIBRARIES)


def test_a_corrupt_cache_falls_back_to_the_dirs_with_a_warning(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    (root / "etc/ld.so.cache").write_bytes(ldcache.NEW_MAGIC + b"1.1" + b"\xff" * 8)
    with caplog.at_level(logging.WARNING):
        found = driver_files.discover(root, VERSION)
    assert "linker cache unreadable" in caplog.text
    assert len(found.libraries) == len(fake_driver_root.LIBRARIES)


def test_absolute_links_resolve_inside_the_driver_root(tmp_path: Path) -> None:
    """GPU Operator roots hold absolute links (/usr/lib/...): followed from the host's / they would name the host's files."""
    root = tmp_path / "r"
    lib = root / "usr/lib64"
    lib.mkdir(parents=True)
    (lib / f"libcuda.so.{VERSION}").write_text("x")
    (lib / "libcuda.so.1").symlink_to(f"/usr/lib64/libcuda.so.{VERSION}")
    (lib / "escape.so.1").symlink_to("../../../../../../etc/hostname")
    (root / "etc").mkdir()
    (root / "etc/ld.so.cache").write_bytes(
        ldcache.render([ldcache.CacheEntry("libcuda.so.1", "/usr/lib64/libcuda.so.1"), ldcache.CacheEntry("escape.so.1", "/usr/lib64/escape.so.1")])
    )
    found = driver_files.discover(root, VERSION)
    assert [(lib.path, lib.sonames) for lib in found.libraries] == [(f"/usr/lib64/libcuda.so.{VERSION}", ("libcuda.so.1",))]
    assert driver_files.resolve_in_root(root, "/usr/lib64/escape.so.1") is None  # ".." stops at the root: /etc/hostname is not there


def test_link_loops_end(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    assert driver_files.resolve_in_root(tmp_path, "/a") is None


@pytest.mark.parametrize("version", ["../../etc", "580.95.05/..", "", "580", f"{VERSION}\n"])  # `$` matches before a final newline
def test_a_version_that_is_not_a_number_names_no_paths(root: Path, version: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        found = driver_files.discover(root, version)
    assert found.is_empty() and "not a version number" in caplog.text


def test_without_a_hook_each_library_is_also_mounted_at_its_soname(root: Path) -> None:
    edits = driver_files.claim_edits(driver_files.discover(root, VERSION), hook_path=None)
    by_container = {m.container_path: m for m in edits.mounts}
    for link in ("libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1"):
        mount = by_container[f"{LIB}/{link}"]
        assert mount.host_path.endswith(f".so.{VERSION}") and mount.options == driver_files.READ_ONLY
    assert edits.hooks == []


def test_a_linker_name_in_the_cache_is_mounted_once(root: Path) -> None:
    """The cache lists libcuda.so beside libcuda.so.1 (a real host does): one mount per container path."""
    edits = driver_files.claim_edits(driver_files.discover(root, VERSION), hook_path=None)
    container_paths = [m.container_path for m in edits.mounts]
    assert container_paths.count(f"{LIB}/libcuda.so") == 1
    assert len(container_paths) == len(set(container_paths))


def test_with_a_hook_the_links_and_ldcache_come_from_nvidia_cdi_hook(root: Path) -> None:
    edits = driver_files.claim_edits(driver_files.discover(root, VERSION), hook_path="/usr/bin/nvidia-cdi-hook")
    assert f"{LIB}/libcuda.so.1" not in {m.container_path for m in edits.mounts}
    symlinks, ldconfig = edits.hooks
    assert symlinks.hook_name == ldconfig.hook_name == "createContainer"
    assert symlinks.args[:2] == ("nvidia-cdi-hook", "create-symlinks")
    assert f"libcuda.so.{VERSION}::{LIB}/libcuda.so.1" in symlinks.args
    assert ldconfig.args == ("nvidia-cdi-hook", "update-ldcache", "--folder", LIB)


def test_nvidia_ctk_as_the_hook_takes_the_hook_subcommand(root: Path) -> None:
    edits = driver_files.claim_edits(driver_files.discover(root, VERSION), hook_path="/usr/bin/nvidia-ctk")
    assert [h.args[:3] for h in edits.hooks] == [("nvidia-ctk", "hook", "create-symlinks"), ("nvidia-ctk", "hook", "update-ldcache")]


def test_an_mps_claim_gets_its_own_pipe_directory_writable(open_backend: OpenBackend) -> None:
    backend = open_backend("dgx-h100")
    mps = validate_config({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": {"strategy": "MPS"}})
    plain = backend.prepare(ClaimRef("ns", "a", "u1"), [AllocatedDevice("gpu", "node-a", "gpu-0")]).claim_edits
    shared = backend.prepare(ClaimRef("ns", "b", "u2"), [AllocatedDevice("gpu", "node-a", "gpu-1", config=mps)]).claim_edits
    assert "/tmp/nvidia-mps" not in {m.container_path for m in plain.mounts}
    pipe = next(m for m in shared.mounts if m.container_path == "/tmp/nvidia-mps")
    assert pipe.options == driver_files.READ_WRITE
    assert pipe.host_path.endswith("/mps/u2/pipe") and Path(pipe.host_path, "nvidia-cuda-mps-control.pid").is_file()
    assert plain.env == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert shared.env == ["NVIDIA_VISIBLE_DEVICES=void", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"]


def test_the_simulated_backend_mounts_its_profile_driver_version(open_backend: OpenBackend) -> None:
    backend = open_backend("dgx-h100")
    edits = backend.prepare(ClaimRef("ns", "a", "u1"), [AllocatedDevice("gpu", "node-a", "gpu-0")]).claim_edits
    version = backend.simulator.section.driverVersion if backend.simulator else ""
    assert f"{LIB}/libcuda.so.{version}" in {m.container_path for m in edits.mounts}


@pytest.mark.parametrize("layout", ["new", "old", "compat"])
def test_a_library_only_the_cache_knows_is_found_in_every_layout(root: Path, layout: str) -> None:
    """A driver installed outside the library dirs (here /opt/nvidia/lib) is found through ld.so.cache alone."""
    extra = root / "opt/nvidia/lib"
    extra.mkdir(parents=True)
    (extra / f"libnvidia-extra.so.{VERSION}").write_text("x")
    (extra / "libnvidia-extra.so.1").symlink_to(f"libnvidia-extra.so.{VERSION}")
    cache = root / "etc/ld.so.cache"
    entries = [*ldcache.parse(cache.read_bytes()), ldcache.CacheEntry("libnvidia-extra.so.1", "/opt/nvidia/lib/libnvidia-extra.so.1")]
    cache.write_bytes(ldcache.render(entries, layout))
    found = {lib.path: lib.sonames for lib in driver_files.discover(root, VERSION).libraries}
    assert found[f"/opt/nvidia/lib/libnvidia-extra.so.{VERSION}"] == ("libnvidia-extra.so.1",)
    assert found[f"{LIB}/libcuda.so.{VERSION}"] == ("libcuda.so", "libcuda.so.1")
