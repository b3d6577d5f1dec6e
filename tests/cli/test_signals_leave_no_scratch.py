"""Signals and simulated backends' scratch dirs: `run --profile` stopped by SIGTERM, even during start-up, and a
one-shot command (`demo`) stopped by SIGTERM leave $TMPDIR as they found it; a daemon killed with SIGKILL
leaves scratch dirs the next simulated daemon reaps."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.support import eventually
from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.simulation.api_server import SimApiServer

DRIVERS = 3  # gpu.nvidia.com, gpu.amd.com and gaudi.intel.com: each simulated backend makes a scratch dir


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    """An NVIDIA T4, an AMD MI300X and a Gaudi 2 board on one node: every vendor's scratch dir."""
    sections = {vendor: dict(load_profile(name).sections[vendor]) for vendor, name in (("nvidia", "t4"), ("amd", "mi300x"), ("gaudi", "gaudi2-hls"))}
    path = tmp_path / "nvidia-gaudi.yaml"
    path.write_text(yaml.safe_dump({"name": "nvidia-gaudi", **sections}))
    return path


def spawn(server: SimApiServer, work: Path, profile: Path) -> subprocess.Popen[str]:
    for owned_by_others in ("k/plugins_registry", "k/plugins", "c"):  # the kubelet's and the runtime's: run creates none
        (work / owned_by_others).mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "dra_driver.cli.main",
        "run",
        "--profile",
        str(profile),
        "--simulated-root",
        "none",
        "--node-name",
        "n",
        "--api-server",
        server.url,
        "--kubelet-dir",
        str(work / "k"),
        "--state-dir",
        str(work / "s"),
        "--cdi-dir",
        str(work / "c"),
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # $TMPDIR: empty_tmpdir


def start(server: SimApiServer, work: Path, profile: Path, serving: int = DRIVERS) -> subprocess.Popen[str]:
    """The daemon, once `serving` drivers' registration sockets exist (the first one: start-up is still going on)."""
    daemon = spawn(server, work, profile)
    wait_for(lambda: len(list((work / "k" / "plugins_registry").glob("*.sock"))) >= serving, daemon)
    return daemon


def wait_for(condition: Callable[[], bool], process: subprocess.Popen[str]) -> None:
    """Until `condition`; the process killed and its stderr shown if it exits first or never gets there."""
    try:
        eventually(lambda: condition() or process.poll() is not None, "the process to get there", 60, step=0.001)
    finally:
        if not condition():
            process.kill()
            pytest.fail(f"the process never got there: {process.communicate()[1]}")


def scratch_pids(directory: Path) -> list[str]:
    """The PIDs in the scratch dirs' names (dra-<vendor>-sim-<pid>-<random>); other files (lark's grammar cache) aside."""
    return sorted(path.name.split("-")[3] for path in directory.glob("dra-*"))


def test_sigkill_leaves_dirs_the_next_daemon_reaps_and_sigterm_in_start_up_leaves_none(
    empty_tmpdir: Path, short_tmp: Path, apiserver: SimApiServer, profile: Path
) -> None:
    killed = spawn(apiserver, short_tmp / "a", profile)
    wait_for(lambda: len(scratch_pids(empty_tmpdir)) == DRIVERS, killed)  # every simulated backend is open
    killed.send_signal(signal.SIGKILL)
    killed.wait(30)
    assert scratch_pids(empty_tmpdir) == [str(killed.pid)] * DRIVERS  # nothing could clean up after SIGKILL
    survivor = start(apiserver, short_tmp / "b", profile, serving=1)
    try:
        assert scratch_pids(empty_tmpdir) == [str(survivor.pid)] * DRIVERS  # the dead daemon's dirs are gone
    finally:
        survivor.send_signal(signal.SIGTERM)
        _, err = survivor.communicate(timeout=60)
    assert survivor.returncode == 0, err
    assert scratch_pids(empty_tmpdir) == []


def test_sigterm_while_the_backends_open_stops_before_serving_and_leaves_nothing(
    empty_tmpdir: Path, short_tmp: Path, apiserver: SimApiServer, profile: Path
) -> None:
    daemon = spawn(apiserver, short_tmp, profile)
    wait_for(lambda: bool(scratch_pids(empty_tmpdir)), daemon)  # the first simulated backend is opening
    daemon.send_signal(signal.SIGTERM)
    _, err = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, err
    assert scratch_pids(empty_tmpdir) == []
    assert not list((short_tmp / "k").rglob("*.sock"))  # it never served


@pytest.mark.parametrize("after_s", [0.0, 1.0])  # while its backends open; while its daemon serves (gRPC threads)
def test_sigterm_to_a_one_shot_command_removes_its_scratch_dirs(empty_tmpdir: Path, profile: Path, after_s: float) -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "dra_driver.cli.main", "demo", "--profile", str(profile)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    wait_for(lambda: bool(scratch_pids(empty_tmpdir)), demo)
    time.sleep(after_s)
    demo.send_signal(signal.SIGTERM)
    _, err = demo.communicate(timeout=60)
    assert demo.returncode in (-signal.SIGTERM, 0), err  # 0: it had finished
    assert scratch_pids(empty_tmpdir) == []
    assert not list(Path("/tmp").glob(f"dra-demo-sim-{demo.pid}-*"))  # its work dir (sockets: kept short, under /tmp)
