"""The MPS control daemon as a process: started, told its limits, checked, stopped.

Everything goes through the host driver's own `nvidia-cuda-mps-control`, as documented by NVIDIA:
`nvidia-cuda-mps-control -d` with CUDA_VISIBLE_DEVICES (the GPUs it serves, by UUID),
CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY set starts a daemon, which writes its PID to
`nvidia-cuda-mps-control.pid` in the pipe directory and listens on `control` there; a command is one line
on the standard input of `nvidia-cuda-mps-control` run without arguments and the same pipe directory
(`quit`, `set_default_active_thread_percentage 50`, `set_default_device_pinned_mem_limit <uuid> 20480M`).
That client exits 0 whatever the daemon made of the command (an unknown one is answered `Unknown command
"<name>"`), so a limit is trusted only once the daemon shows it: the thread percentage is echoed (`50.0`), a
pinned memory limit is read back by the same device identifier (`get_default_device_pinned_mem_limit <uuid>`
answers `20G`: the daemon keeps a limit per identifier, by UUID here, and prints it in its largest whole unit).

Each claim's daemon has a directory of its own (`pipe/`, `log/`, `shm/`), so daemons never see each other.
A daemon is identified by its PID and the start time the kernel gives it (/proc/<pid>/stat), so a PID
reused by another process after the daemon died is never taken for it, signalled or waited on.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dra_driver.common import node_file
from dra_driver.common import file_modes
from dra_driver.common.errors import DraError
from dra_driver.common.logs import fields

log = logging.getLogger(__name__)

BINARY = "nvidia-cuda-mps-control"
PID_FILE = "nvidia-cuda-mps-control.pid"
_MAX_PID_FILE_BYTES = 64
CONTROL_SOCKET = "control"
UNKNOWN_COMMAND = "Unknown command"
SET_THREADS = "set_default_active_thread_percentage"
SET_PINNED = "set_default_device_pinned_mem_limit"
GET_PINNED = "get_default_device_pinned_mem_limit"
COMMAND_TIMEOUT_S = 10.0
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
_POLL_S = 0.005
_MAX_PROC_BYTES = 1 << 20  # a process's command line or environment, read up to this


class MpsError(DraError):
    """The control daemon could not be started, told or stopped; names the daemon's directory."""

    def __init__(self, directory: str, reason: str) -> None:
        self.directory = directory
        super().__init__(f"MPS control daemon in {directory}: {reason}")


@dataclass(frozen=True)
class DaemonDir:
    """A claim's daemon directory; the pipe directory is what clients mount."""

    root: Path

    @property
    def pipe(self) -> Path:
        return self.root / "pipe"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def shm(self) -> Path:
        return self.root / "shm"


@dataclass(frozen=True)
class DaemonProcess:
    pid: int
    start_time: int


class MpsControl:
    """Runs `binary` (the driver root's nvidia-cuda-mps-control) with `base_env` plus the daemon's own variables."""

    def __init__(self, binary: Path, base_env: Mapping[str, str], private_shm: bool = False) -> None:
        self.binary = binary
        self._base_env = dict(base_env)
        # On a host the server and its clients must share /dev/shm: the daemon then starts in a mount namespace
        # of its own where the claim's shm directory (also mounted at the containers' /dev/shm) is /dev/shm.
        self._private_shm = private_shm

    def _launcher(self, where: DaemonDir) -> list[str]:
        if not self._private_shm:
            return []
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                'mount --bind "$0" /dev/shm && exec "$@"', str(where.shm)]  # fmt: skip

    def _env(self, where: DaemonDir, gpus: Sequence[str] = ()) -> dict[str, str]:
        env = {**self._base_env, "CUDA_MPS_PIPE_DIRECTORY": str(where.pipe), "CUDA_MPS_LOG_DIRECTORY": str(where.log)}
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        return env

    def start(self, where: DaemonDir, gpus: Sequence[str]) -> DaemonProcess:
        """`nvidia-cuda-mps-control -d`, then wait until it answers on its pipe directory."""
        # Every level its mode (clients run as any user in their containers), whatever the umask; one found wider
        # is narrowed and one of another user refused: the root-run daemon writes its logs there.
        for directory in (where.root.parent, where.root, where.pipe, where.log, where.shm):
            file_modes.own_dir(directory, file_modes.MPS_DIR)
        try:
            result = subprocess.run(
                [*self._launcher(where), str(self.binary), "-d"], env=self._env(where, gpus), capture_output=True, text=True,
                timeout=START_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL, umask=file_modes.MPS_DAEMON_UMASK,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise MpsError(str(where.root), f"cannot run {self.binary} -d: {exc}") from exc
        if result.returncode != 0:
            raise MpsError(str(where.root), f"{self.binary} -d failed (exit {result.returncode}): {_output(result)}")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            found = self.running(where)
            if found is not None and self._answers(where):
                return found
            time.sleep(_POLL_S)
        raise MpsError(str(where.root), f"the MPS control daemon did not come up within {START_TIMEOUT_S:.0f} s "
                                        f"(no live PID in {where.pipe / PID_FILE}); see {where.log}/control.log")

    def _answers(self, where: DaemonDir) -> bool:
        """Ready: its control socket is there, or (another layout of the pipe directory) it answers a query."""
        if (where.pipe / CONTROL_SOCKET).exists():
            return True
        try:
            self.send(where, "get_default_active_thread_percentage")  # the query NVIDIA's deployment probes with
        except MpsError:
            return False
        return True

    def send(self, where: DaemonDir, command: str) -> str:
        """One command line to the daemon of `where`; its answer. A non-zero exit or an unknown command is an MpsError."""
        try:
            result = subprocess.run(
                [str(self.binary)], input=command + "\n", env=self._env(where), capture_output=True, text=True,
                timeout=COMMAND_TIMEOUT_S, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise MpsError(str(where.root), f"cannot send {command!r} to the MPS control daemon: {exc}") from exc
        if result.returncode != 0:
            raise MpsError(str(where.root), f"the MPS control daemon refused {command!r} (exit {result.returncode}): {_output(result)}")
        answer = result.stdout.strip()
        if answer.startswith(UNKNOWN_COMMAND):
            raise MpsError(str(where.root), f"the MPS control daemon does not know {command!r}: it answered {answer!r} "
                                            f"(exit status 0); check that the driver's {BINARY} has this command")
        return answer

    def apply(self, where: DaemonDir, command: str) -> None:
        """Send one limit command and make sure it took, from the daemon's answers (its exit status says nothing).
        Anything but a one-line limit command (a sharing record is read from disk) is refused unsent."""
        name, args = command.split(" ", 1)[0], command.split()[1:]
        if "\n" in command or not ((name == SET_THREADS and len(args) == 1) or (name == SET_PINNED and len(args) == 2)):
            raise MpsError(str(where.root), f"{command!r} is not a limit command whose effect can be checked")
        answer = self.send(where, command)
        if name == SET_THREADS:
            if not _same_number(answer, args[0]):
                raise MpsError(str(where.root), f"the MPS control daemon did not take {command!r}: it answered {answer!r}, "
                                                f"not the percentage {args[0]}")
            return
        shown = self.send(where, f"{GET_PINNED} {args[0]}")
        if not _same_memory(shown, args[1]):
            raise MpsError(str(where.root), f"the MPS control daemon did not take {command!r}: it answered {answer!r}, "
                                            f"and {GET_PINNED} {args[0]} answered {shown!r}, not {args[1]}")

    def running(self, where: DaemonDir, expected: DaemonProcess | None = None) -> DaemonProcess | None:
        """The live control daemon of `where` (its PID file), or None; with `expected`, only that very process."""
        try:
            pid = int(node_file.read_regular(where.pipe / PID_FILE, _MAX_PID_FILE_BYTES).strip())
        except (OSError, ValueError):
            pid = expected.pid if expected is not None else 0
        if pid <= 0 or (expected is not None and pid != expected.pid):
            return None
        found = _identity(pid)
        if found is None or (expected is not None and found != expected):
            return None
        return found

    def _coming_up(self, where: DaemonDir) -> DaemonProcess | None:
        """A daemon of `where` that has no PID file yet: `-d` returns before the daemon writes it, so a driver killed
        in between leaves nothing on disk that names it. Found by its environment, then given until it answers (as
        `start` waits) so that `quit` reaches it; left alone it would outlive its removed directory."""
        process = _started_for(where.pipe)
        deadline = time.monotonic() + START_TIMEOUT_S
        while process is not None and time.monotonic() < deadline and _identity(process.pid) == process and not self._answers(where):
            time.sleep(_POLL_S)
        return process

    def stop(self, where: DaemonDir, process: DaemonProcess | None) -> None:
        """`quit`, then wait for the daemon to exit; one that does not is killed (it is verified to be ours first)."""
        # The recorded process, else whatever the PID file names (a daemon started again whose record was not saved),
        # else one `-d` started whose PID file is not written yet (its starter was killed in between).
        process = (self.running(where, process) if process is not None else None) or self.running(where) or self._coming_up(where)
        if process is None:
            return
        try:
            self.send(where, "quit")
        except MpsError as exc:
            log.warning("MPS control daemon did not take quit; killing it", extra=fields(directory=str(where.root), error=str(exc)))
        if not _wait_gone(process, STOP_TIMEOUT_S):
            log.warning("MPS control daemon still running after quit; killing it", extra=fields(directory=str(where.root), pid=process.pid))
            if _identity(process.pid) == process:
                os.kill(process.pid, signal.SIGKILL)
            if not _wait_gone(process, STOP_TIMEOUT_S):
                raise MpsError(str(where.root), f"the MPS control daemon (PID {process.pid}) does not exit")


_MEMORY = re.compile(r"([0-9]+)(?:\.([0-9]+))?([KMGT]?)(?:i?B)?", re.IGNORECASE)
_UNIT_BYTES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}  # MPS units are binary: 8192M is 8G


def _same_number(answer: str, sent: str) -> bool:
    try:
        return float(answer) == float(sent)
    except ValueError:
        return False


def _same_memory(answer: str, sent: str) -> bool:
    """Whether the daemon's display of a limit is what was sent. The real daemon (580) truncates to its unit:
    1024M and more in whole G (40779M is shown as 39G, 1536M as 1G), less in M (500M)."""
    shown, wanted = _quantity(answer), _quantity(sent)
    return shown is not None and wanted is not None and shown[0] <= wanted[0] < shown[0] + shown[1]


def _quantity(text: str) -> tuple[float, float] | None:
    """Bytes of a limit as MPS writes it (`8G`, `8192M`, `7.5G`) and the size of its last digit (what a truncated
    display can hide); None when it is no such limit (empty, a message)."""
    match = _MEMORY.fullmatch(text.strip())
    if match is None:
        return None
    whole, fraction, unit = match.groups()
    scale = _UNIT_BYTES[unit.upper()]
    if not fraction:
        return float(int(whole) * scale), float(scale)
    return float(f"{whole}.{fraction}") * scale, scale / 10 ** len(fraction)


def _output(result: subprocess.CompletedProcess[str]) -> str:
    text = " ".join((result.stderr.strip() + " " + result.stdout.strip()).split())
    return text[:300] or "(no output)"


def daemon_alive(pid: int | None, start_time: int | None) -> bool:
    """Whether the control daemon a sharing record names still runs (same PID and start time: not a reused PID)."""
    if pid is None or pid <= 0:
        return False
    found = _identity(pid)
    return found is not None and (start_time is None or found.start_time == start_time)


def _identity(pid: int) -> DaemonProcess | None:
    """(pid, start time) of a live nvidia-cuda-mps-control process; None if gone, a zombie or another program."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    after_name = stat.rsplit(")", 1)[-1].split()  # the name may hold spaces and parentheses
    if len(after_name) < 20 or after_name[0] == "Z":
        _reap(pid)
        return None
    if not _runs_the_control_binary(cmdline):
        return None
    return DaemonProcess(pid, int(after_name[19]))


def _runs_the_control_binary(cmdline: list[bytes]) -> bool:
    """The program is nvidia-cuda-mps-control (directly, or behind its interpreter: the simulated stand-in)."""
    return any(os.path.basename(arg.decode(errors="replace")) == BINARY for arg in cmdline[:3])


def _started_for(pipe: Path) -> DaemonProcess | None:
    """The live control daemon whose environment names `pipe` as its CUDA_MPS_PIPE_DIRECTORY (/proc; root reads any
    process's environment). The program name is checked first, so no other process is looked at further."""
    wanted = b"CUDA_MPS_PIPE_DIRECTORY=" + os.fsencode(str(pipe))
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read(_MAX_PROC_BYTES).split(b"\0")
            if not _runs_the_control_binary(cmdline):
                continue
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = handle.read(_MAX_PROC_BYTES).split(b"\0")
        except OSError:
            continue
        if wanted in environ:
            return _identity(pid)
    return None


def _reap(pid: int) -> None:
    """Collect a daemon that exited as our child (when this process is PID 1 of its container, orphans are ours)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _wait_gone(process: DaemonProcess, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _identity(process.pid) != process:
            return True
        time.sleep(_POLL_S)
    return False
