"""Every vendor's simulated backend leaves $TMPDIR as it found it: after close, and when opening fails half-way."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from dra_driver.common.errors import BackendUnavailable, ProfileError
from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.backend.registry import backend_classes, open_backends
from dra_driver.backend.interface import BackendSettings

VENDOR_PROFILES = {"nvidia": "t4", "amd": "mi210", "gaudi": "gaudi2-hls"}


def section(profile: str, vendor: str) -> dict[str, Any]:
    return copy.deepcopy(dict(load_profile(profile).sections[vendor]))


@pytest.mark.parametrize("vendor", sorted(VENDOR_PROFILES))
def test_an_open_backend_holds_one_named_dir_and_close_removes_it(empty_tmpdir: Path, vendor: str) -> None:
    backend = backend_classes()[vendor].from_profile(section(VENDOR_PROFILES[vendor], vendor), BackendSettings(node_name="n"))
    try:
        [held] = list(empty_tmpdir.iterdir())
        assert held.name.startswith(f"dra-{vendor}-sim-") and held.is_dir()
        assert backend.discover().devices
    finally:
        backend.close()
    assert not list(empty_tmpdir.iterdir())
    backend.close()  # a second close is harmless


def test_nvidia_failing_after_its_dir_exists_removes_it_and_uninstalls_the_simulated_library(
    empty_tmpdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dra_driver_nvidia import backend as nvidia_backend
    from dra_driver_nvidia.simulated import fake_driver_root, fake_nvml

    def no_space(root: Path, version: str) -> Path:
        assert root.parent.parent == empty_tmpdir  # the scratch dir exists by now
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fake_driver_root, "build", no_space)
    with pytest.raises(OSError, match="No space left"):
        nvidia_backend.NvidiaBackend.from_profile(section("t4", "nvidia"), BackendSettings())
    assert not list(empty_tmpdir.iterdir())
    assert fake_nvml.installed() is None


def test_amd_without_gpus_removes_its_dir(empty_tmpdir: Path) -> None:
    from dra_driver_amd.backend import AmdBackend

    empty = section("mi210", "amd")
    empty["gpus"] = []
    with pytest.raises(BackendUnavailable, match="no AMD GPUs"):
        AmdBackend.from_profile(empty, BackendSettings())  # default sysfs root /sys: a scratch dir is made instead
    assert not list(empty_tmpdir.iterdir())


def test_gaudi_with_a_bad_section_removes_its_dir(empty_tmpdir: Path) -> None:
    from dra_driver_gaudi.backend import GaudiBackend

    bad = section("gaudi2-hls", "gaudi")
    bad["devices"][0]["bdf"] = "not-a-bdf"
    with pytest.raises(ProfileError):
        GaudiBackend.from_profile(bad, BackendSettings())
    assert not list(empty_tmpdir.iterdir())


def test_a_bad_section_closes_the_vendors_opened_before_it(empty_tmpdir: Path, tmp_path: Path) -> None:
    """mixed-node opens amd before nvidia: a bad nvidia section must not leave amd's simulated sysfs behind."""
    import yaml

    data: dict[str, Any] = {"name": "bad-mixed", "amd": section("mixed-node", "amd"), "nvidia": section("mixed-node", "nvidia")}
    data["nvidia"]["gpus"][0]["minorr"] = 3
    bad = tmp_path / "bad-mixed.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError, match=r"nvidia\.gpus\.0\.minorr"):
        open_backends(BackendSettings(node_name="n"), load_profile(str(bad)))
    assert not list(empty_tmpdir.iterdir())
