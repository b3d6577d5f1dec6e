"""Shared fixtures: AMD backends opened on the shipped simulated profiles."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.backend.interface import BackendSettings

from dra_driver_amd.backend import AmdBackend

OpenBackend = Callable[..., AmdBackend]


@pytest.fixture
def open_backend(tmp_path: Path) -> Iterator[OpenBackend]:
    opened: list[AmdBackend] = []

    def _open(profile: str = "mi300x", partitioning: str = "static", section: dict | None = None, **settings: object) -> AmdBackend:
        data = section if section is not None else dict(load_profile(profile).sections["amd"])
        backend = AmdBackend.from_profile(
            data,
            BackendSettings(node_name="node-a", partitioning=partitioning, sysfs_root=tmp_path / f"sys{len(opened)}", **settings),  # type: ignore[arg-type]
        )
        backend.health_poll_s = 0.01
        opened.append(backend)
        return backend

    yield _open
    for backend in opened:
        backend.close()
