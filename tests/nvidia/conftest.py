from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.backend.interface import BackendSettings
from dra_driver_nvidia.simulated import fake_nvml
from dra_driver_nvidia.backend import NvidiaBackend

OpenBackend = Callable[..., NvidiaBackend]


def profile_section(name: str) -> dict[str, Any]:
    """A deep copy of a shipped profile's nvidia section, safe to modify in a test."""
    return copy.deepcopy(dict(load_profile(name).sections["nvidia"]))


@pytest.fixture
def open_backend() -> Iterator[OpenBackend]:
    """open_backend(profile name or section, partitioning=..., node_name=...) with cleanup."""
    opened: list[NvidiaBackend] = []

    def _open(profile: str | dict[str, Any], partitioning: str = "static", node_name: str = "node-a", **settings: Any) -> NvidiaBackend:
        section = profile_section(profile) if isinstance(profile, str) else profile
        backend = NvidiaBackend.from_profile(
            section, BackendSettings(node_name=node_name, partitioning=partitioning, **settings)  # type: ignore[arg-type]
        )
        opened.append(backend)
        return backend

    yield _open
    for backend in opened:
        backend.close()
    fake_nvml.install(None)
