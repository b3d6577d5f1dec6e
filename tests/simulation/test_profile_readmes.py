"""Each vendor's profile directory documents its schema and names every profile it ships."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

VENDORS_DIR = Path(__file__).resolve().parents[2] / "vendors"
VENDORS = sorted(path.name for path in VENDORS_DIR.iterdir() if (path / "profiles").is_dir())


@pytest.mark.parametrize("vendor", VENDORS)
def test_readme_lists_every_shipped_profile(vendor: str) -> None:
    directory = VENDORS_DIR / vendor / "profiles"
    readme = directory / "README.md"
    assert readme.is_file(), f"{readme} is missing (the top-level README points at vendors/*/profiles/README.md)"
    listed = set(re.findall(r"^\| `([a-z0-9-]+)` \|", readme.read_text(), flags=re.MULTILINE))
    shipped = {path.stem for path in directory.glob("*.yaml")}
    assert listed == shipped, f"{readme}: table lists {sorted(listed)}, directory ships {sorted(shipped)}"


def test_every_vendor_ships_profiles() -> None:
    assert VENDORS == ["amd", "gaudi", "nvidia"]
