"""The stand-in nvidia-cuda-mps-control against what the real 580.159.04 binary was seen to do on an H100
(docs/hardware-validation.md, "MPS control daemon"): its folders, its answers, its exit status, its log lines.
Also the driver's reading of those answers (a limit shown as 8G is the 8192M it was given)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import eventually
from dra_driver_nvidia.simulated import fake_driver_root, mps_control_standin
from dra_driver_nvidia.mps import DaemonDir, MpsControl, MpsError, _same_memory, _started_for

GPU = "GPU-5a8b4f6e-2c1d-4e3f-9a7b-0c1d2e3f4a5b"


class Standin:
    def __init__(self, root: Path) -> None:
        self.binary = fake_driver_root.build(root / "driver-root", "580.159.04") / "usr/bin/nvidia-cuda-mps-control"
        self.pipe, self.log = root / "pipe", root / "log"
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe),
                    "CUDA_MPS_LOG_DIRECTORY": str(self.log), "CUDA_VISIBLE_DEVICES": GPU}  # fmt: skip

    def run(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.binary), *args], input=stdin, env=self.env, capture_output=True, text=True, timeout=10, check=False)

    def ask(self, command: str) -> tuple[int, str]:
        result = self.run(stdin=command + "\n")
        return result.returncode, result.stdout.strip()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Standin]:
    standin = Standin(tmp_path)
    assert standin.run("-d").returncode == 0
    # -d returns at once; the daemon comes up after
    eventually((standin.pipe / "nvidia-cuda-mps-control.pid").exists, "the daemon's PID file", 10, step=0.01)
    yield standin
    if (standin.pipe / "control").exists():
        standin.ask("quit")


def test_the_daemon_lays_out_its_pipe_and_log_folders_as_the_real_one(daemon: Standin) -> None:
    modes = {p.name: os.lstat(p).st_mode for p in daemon.pipe.iterdir()}
    assert set(modes) == {"control", "control_privileged", "control_lock", "log", "nvidia-cuda-mps-control.pid"}
    assert stat.S_ISSOCK(modes["control"]) and stat.S_IMODE(modes["control"]) == 0o666
    assert stat.S_ISSOCK(modes["control_privileged"]) and stat.S_IMODE(modes["control_privileged"]) == 0o755
    assert stat.S_ISFIFO(modes["log"])
    assert (daemon.pipe / "nvidia-cuda-mps-control.pid").read_text().strip().isdigit()
    assert sorted(p.name for p in daemon.log.iterdir()) == ["control.log", "server.log"]
    assert (daemon.log / "server.log").read_text() == ""


def test_every_command_answers_as_the_real_one_and_exits_0(daemon: Standin) -> None:
    seen = [
        daemon.ask("get_default_active_thread_percentage"),
        daemon.ask("set_default_active_thread_percentage 50"),
        daemon.ask("get_default_device_pinned_mem_limit 0"),
        daemon.ask("set_default_device_pinned_mem_limit 0 20G"),
        daemon.ask("get_default_device_pinned_mem_limit 0"),
        daemon.ask(f"set_default_device_pinned_mem_limit {GPU} 8192M"),
        daemon.ask(f"get_default_device_pinned_mem_limit {GPU}"),
        daemon.ask("get_server_list"),
        daemon.ask("bogus_command"),
    ]
    assert seen == [(0, "100.0"), (0, "50.0"), (0, ""), (0, ""), (0, "20G"), (0, ""), (0, "8G"), (0, ""),
                    (0, 'Unknown command "bogus_command"')]  # fmt: skip


def test_a_limit_is_kept_per_identifier_as_given(daemon: Standin) -> None:
    daemon.ask(f"set_default_device_pinned_mem_limit {GPU} 8192M")
    assert daemon.ask("get_default_device_pinned_mem_limit 0") == (0, "")  # set by UUID, asked by ordinal: nothing
    daemon.ask("set_default_device_pinned_mem_limit 0 1536M")
    assert daemon.ask("get_default_device_pinned_mem_limit 0") == (0, "1G")  # truncated to whole G, as the 580 binary shows it


def test_quit_logs_its_exit_and_every_line_has_the_real_format(daemon: Standin) -> None:
    daemon.ask("get_server_list")
    assert daemon.ask("quit") == (0, "")
    eventually(lambda: "Exit with status 0" in (daemon.log / "control.log").read_text(), "the daemon to log its exit", 10, step=0.01)
    lines = (daemon.log / "control.log").read_text().splitlines()
    assert all(re.fullmatch(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} Control +\d+\] .+", line) for line in lines), lines
    assert any(line.endswith("] Cmd:get_server_list") for line in lines)
    assert daemon.ask("get_server_list")[0] == 1  # no daemon any more: the client's one error


@pytest.mark.parametrize(
    ("answer", "sent", "same"),
    # What the real 580 daemon showed on an H100: 40779M as 39G, 1536M and 1024M as 1G, 7680M as 7G, 500M as 500M.
    [("8G", "8192M", True), ("20G", "20480M", True), ("39G", "40779M", True), ("1G", "1536M", True), ("7G", "7680M", True),
     ("500M", "500M", True), ("8G", "9216M", False), ("39G", "40960M", False), ("500M", "501M", False),
     ("7.5G", "7680M", True), ("7.5G", "7800M", False), ("", "8192M", False), ('Unknown command "x"', "8192M", False)],
)  # fmt: skip
def test_a_limit_read_back_is_compared_as_a_quantity(answer: str, sent: str, same: bool) -> None:
    assert _same_memory(answer, sent) is same


@pytest.mark.parametrize("command", ["", "quit", "set_default_active_thread_percentage 50\nquit", "get_server_list"])
def test_only_a_limit_command_is_applied_and_anything_else_is_refused_unsent(daemon: Standin, command: str) -> None:
    control = MpsControl(daemon.binary, {"PATH": daemon.env["PATH"]})
    where = DaemonDir(daemon.pipe.parent)  # its pipe/ and log/ are the daemon's
    with pytest.raises(MpsError, match="is not a limit command"):
        control.apply(where, command)
    assert daemon.ask("get_default_active_thread_percentage") == (0, "100.0")  # still running, nothing changed


def test_stop_reaches_a_daemon_that_has_not_written_its_pid_file_yet(tmp_path: Path) -> None:
    """`-d` returns before the daemon names itself; a driver killed right then restarts and unprepares with nothing on
    disk naming the daemon. stop() must still find it (by its environment) and make it quit, not leave it running."""
    standin = Standin(tmp_path)
    standin.binary.with_name(standin.binary.name + mps_control_standin.QUIRKS_SUFFIX).write_text("start slow\n")
    (tmp_path / "pipe").mkdir()
    (tmp_path / "log").mkdir()
    assert standin.run("-d").returncode == 0
    assert not (standin.pipe / "nvidia-cuda-mps-control.pid").exists()  # the window: nothing names the daemon yet
    control = MpsControl(standin.binary, {"PATH": standin.env["PATH"]})
    where = DaemonDir(tmp_path)
    control.stop(where, None)
    assert _started_for(standin.pipe) is None  # it quit
    assert "Exit with status 0" in (standin.log / "control.log").read_text()
