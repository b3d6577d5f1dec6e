from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from dra_driver.backend import hardware_profiles

from dra_driver.backend import registry
from dra_driver.common.errors import BackendUnavailable, ProfileError
from dra_driver.model import Inventory
from dra_driver.backend.interface import BackendSettings, VendorBackend


class _Backend(VendorBackend):
    vendor = "acme"
    driver_name = "gpu.acme.example"
    opened_with: Mapping[str, Any] | None = None

    @classmethod
    def from_host(cls, settings: BackendSettings) -> VendorBackend:
        raise BackendUnavailable("acme", "libacme.so not found")

    @classmethod
    def from_profile(cls, section: Mapping[str, Any], settings: BackendSettings) -> VendorBackend:
        backend = cls()
        backend.opened_with = section
        return backend

    def discover(self) -> Inventory:
        return Inventory(self.driver_name)

    def validate_config(self, parameters: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    def prepare(self, claim: Any, devices: Any) -> Any:
        raise NotImplementedError

    def unprepare(self, claim: Any, state: Mapping[str, Any]) -> None:
        return None


class _EntryPoint:
    def __init__(self, name: str, target: object) -> None:
        self.name, self.value, self._target = name, f"tests:{name}", target

    def load(self) -> object:
        if isinstance(self._target, Exception):
            raise self._target
        return self._target


@pytest.fixture
def fake_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    points = [_EntryPoint("acme", _Backend), _EntryPoint("broken", ImportError("boom")), _EntryPoint("notabackend", object)]
    monkeypatch.setattr(registry, "entry_points", lambda group: points if group == registry.ENTRY_POINT_GROUP else [])
    registry.backend_classes.cache_clear()
    yield
    registry.backend_classes.cache_clear()


def test_broken_and_foreign_entry_points_are_skipped(fake_entry_points: None) -> None:
    assert registry.backend_classes() == {"acme": _Backend}


def test_host_mode_reports_unavailable_plainly(fake_entry_points: None) -> None:
    opened = registry.open_backends(BackendSettings())
    assert opened.backends == []
    assert [str(u) for u in opened.unavailable] == ["acme: libacme.so not found"]


def test_unknown_vendor_is_reported(fake_entry_points: None) -> None:
    opened = registry.open_backends(BackendSettings(), vendors=["zeta"])
    assert "no backend named 'zeta'" in str(opened.unavailable[0])


def test_profile_mode_simulates_only_described_vendors(fake_entry_points: None, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: p\nacme:\n  gpus: 2\n")
    opened = registry.open_backends(BackendSettings(), profile=hardware_profiles.load_profile(str(path)))
    assert len(opened.backends) == 1 and opened.backends[0].opened_with == {"gpus": 2}


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("- a\n", "must be a YAML mapping"),
        ("name: x\n", "describes no vendor"),
        ("name: x\nacme: 3\n", "must be mappings"),
        ("a: [", r"bad.yaml:1: document 1: invalid YAML"),
        ("a: 1\na: 2\n", "duplicate key 'a'"),
    ],
)
def test_bad_profile_files(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=fragment):
        hardware_profiles.load_profile(str(path))


def test_unknown_profile_name_lists_choices(fake_entry_points: None) -> None:
    with pytest.raises(ProfileError, match="unknown profile 'nope'"):
        hardware_profiles.load_profile("nope")


def test_only_the_named_vendors_are_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded: list[str] = []

    class _Counting(_EntryPoint):
        def load(self) -> object:
            loaded.append(self.name)
            return super().load()

    points = [_Counting("acme", _Backend), _Counting("broken", ImportError("boom"))]
    monkeypatch.setattr(registry, "entry_points", lambda group: points if group == registry.ENTRY_POINT_GROUP else [])
    registry.backend_classes.cache_clear()
    try:
        opened = registry.open_backends(BackendSettings(), vendors=["acme"])
        assert loaded == ["acme"] and len(opened.unavailable) == 1  # acme's host probe; "broken" never imported
    finally:
        registry.backend_classes.cache_clear()


def test_a_shipped_profile_by_name_imports_only_its_vendor() -> None:
    code = (
        "import sys\n"
        "from dra_driver.backend.hardware_profiles import load_profile\n"
        "profile = load_profile('gaudi3-hls')\n"
        "print(sorted(profile.sections), sorted(m for m in sys.modules if m.endswith('.backend') and m.startswith('dra_driver_')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['gaudi'] ['dra_driver_gaudi.backend']"
