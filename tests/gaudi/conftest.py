"""Fixtures: Gaudi backends on sysfs trees built in temp dirs from profile data."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from dra_driver.backend.hardware_profiles import load_profile_file
from dra_driver.backend.interface import BackendSettings
from dra_driver_gaudi.backend import PROFILE_DIR, GaudiBackend
from dra_driver_gaudi.simulated.fake_sysfs import FakeSysfs, build_fake_sysfs

NODE = "gaudi-node-1"


def profile_section(name: str) -> dict[str, Any]:
    """A deep copy of a shipped profile's gaudi section, safe to modify in a test."""
    return copy.deepcopy(dict(load_profile_file(PROFILE_DIR / f"{name}.yaml").sections["gaudi"]))


def one_device(**overrides: Any) -> dict[str, Any]:
    device = {"bdf": "0000:19:00.0", "device_id": "0x1020", "accel_index": 2, "module_id": 6, "pci_root": "pci0000:15", "uverbs": 4}
    device.update(overrides)
    return device


@pytest.fixture
def open_profile() -> Iterator[Callable[..., GaudiBackend]]:
    """Open a backend from a profile name or section; closed at teardown."""
    opened: list[GaudiBackend] = []

    def factory(profile: str | Mapping[str, Any], **settings: Any) -> GaudiBackend:
        section = profile_section(profile) if isinstance(profile, str) else profile
        backend = GaudiBackend.from_profile(section, BackendSettings(node_name=NODE, **settings))
        backend.health_interval_s = 0.01
        opened.append(backend)
        return backend

    yield factory
    for backend in opened:
        backend.close()


@pytest.fixture
def host_tree(tmp_path: Path) -> Callable[[Mapping[str, Any]], FakeSysfs]:
    """Build a tree under tmp_path/sys for GaudiBackend.from_host (the real-host path)."""

    def build(section: Mapping[str, Any]) -> FakeSysfs:
        return build_fake_sysfs(section, tmp_path / "sys")

    return build
