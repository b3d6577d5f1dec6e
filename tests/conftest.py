"""Checks every test gets: simulated backends are closed by the test (or its fixtures) that opened them; and the fixtures
many folders share (short_tmp, apiserver)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dra_driver.simulation import scratch as sim_scratch

if TYPE_CHECKING:
    from dra_driver.simulation.api_server import SimApiServer

_reported: set[Path] = set()  # leaks already blamed on a test, not blamed again when collected later


@pytest.fixture(autouse=True)
def _no_cluster_of_this_machine(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands find a cluster as kubectl does ($KUBECONFIG, ~/.kube/config, in-cluster): tests see none unless they make one."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path_factory.getbasetemp() / "no-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.fixture(autouse=True)
def _simulated_backends_are_closed() -> Iterator[None]:
    """A simulated backend's scratch directory left open, or removed only by the garbage collector,
    means a missing close(): in a daemon or a CLI command that is a directory left in $TMPDIR."""
    open_before = sim_scratch.open_dirs()
    abandoned_before = len(sim_scratch.abandoned_dirs())
    yield
    left_open = sim_scratch.open_dirs() - open_before - _reported
    collected = set(sim_scratch.abandoned_dirs()[abandoned_before:]) - _reported
    _reported.update(left_open | collected)
    if left_open or collected:
        pytest.fail(
            "simulated backend not closed (call close(), or open it through a fixture that does): "
            f"still open: {sorted(map(str, left_open))}; removed only by the garbage collector: {sorted(map(str, collected))}",
            pytrace=False,
        )


@pytest.fixture
def empty_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty directory this process's tempfile (and so every simulated backend) uses; $TMPDIR too, for child processes."""
    directory = tmp_path / "t"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    monkeypatch.setenv("TMPDIR", str(directory))
    return directory


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temp dir with a short path for daemons that serve: unix socket paths are limited to 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def apiserver() -> Iterator[SimApiServer]:
    """The in-process simulated API server (real HTTP; the real kubernetes client talks to it), stopped after the test."""
    from dra_driver.simulation.api_server import SimApiServer  # loaded only by the tests that serve one

    with SimApiServer() as server:
        yield server
