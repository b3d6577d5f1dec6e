"""Fixtures of the plugin tests beyond tests/node/conftest.py: the root a daemon subprocess runs under."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def root(short_tmp: Path) -> Path:
    """What crash_support.start_daemon expects under its ROOT: the example backend's state dir and a boot ID."""
    (short_tmp / "state").mkdir()
    (short_tmp / "boot_id").write_text("boot-1\n")
    return short_tmp
