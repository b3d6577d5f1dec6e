"""`dra-driver run --profile`: a daemon stopped by SIGTERM, even during start-up, leaves $TMPDIR as it found it;
one killed with SIGKILL leaves scratch dirs the next simulated daemon reaps."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.kube.sim_apiserver import SimApiServer

DRIVERS = 2  # mixed-node: gpu.amd.com and gpu.nvidia.com


@pytest.fixture
def apiserver() -> Iterator[SimApiServer]:
    with SimApiServer() as server:
        yield server


def spawn(server: SimApiServer, work: Path) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "dra_driver.cli.main", "run", "--profile", "mixed-node", "--node-name", "n", "--api-server", server.url,
        "--kubelet-dir", str(work / "k"), "--state-dir", str(work / "s"), "--cdi-dir", str(work / "c"),
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # $TMPDIR: empty_tmpdir


def start(server: SimApiServer, work: Path, serving: int = DRIVERS) -> subprocess.Popen[str]:
    """The daemon, once `serving` drivers' registration sockets exist (the first one: start-up is still going on)."""
    daemon = spawn(server, work)
    deadline = time.monotonic() + 60
    while len(list((work / "k" / "plugins_registry").glob("*.sock"))) < serving:
        if daemon.poll() is not None or time.monotonic() > deadline:
            daemon.kill()
            pytest.fail(f"daemon did not serve: {daemon.communicate()[1]}")
        time.sleep(0.02)
    return daemon


def scratch_pids(directory: Path) -> list[str]:
    return sorted(path.name.split("-")[3] for path in directory.iterdir())  # dra-<vendor>-sim-<pid>-<random>


def test_sigkill_leaves_dirs_the_next_daemon_reaps_and_sigterm_in_start_up_leaves_none(
    empty_tmpdir: Path, short_tmp: Path, apiserver: SimApiServer
) -> None:
    killed = start(apiserver, short_tmp / "a")
    killed.send_signal(signal.SIGKILL)
    killed.wait(30)
    assert scratch_pids(empty_tmpdir) == [str(killed.pid)] * DRIVERS  # nothing could clean up after SIGKILL
    survivor = start(apiserver, short_tmp / "b", serving=1)
    try:
        assert scratch_pids(empty_tmpdir) == [str(survivor.pid)] * DRIVERS  # the dead daemon's dirs are gone
    finally:
        survivor.send_signal(signal.SIGTERM)
        _, err = survivor.communicate(timeout=60)
    assert survivor.returncode == 0, err
    assert not list(empty_tmpdir.iterdir())


def test_sigterm_while_the_backends_open_stops_before_serving_and_leaves_nothing(empty_tmpdir: Path, short_tmp: Path, apiserver: SimApiServer) -> None:
    daemon = spawn(apiserver, short_tmp)
    deadline = time.monotonic() + 60
    while not any(empty_tmpdir.iterdir()):  # the first simulated backend is opening
        assert daemon.poll() is None and time.monotonic() < deadline, "no scratch dir appeared"
        time.sleep(0.001)
    daemon.send_signal(signal.SIGTERM)
    _, err = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, err
    assert not list(empty_tmpdir.iterdir())
    assert not list((short_tmp / "k").rglob("*.sock"))  # it never served
