"""A stand-in for `nvidia-cuda-mps-control`, installed into simulated driver roots as that binary.

Only the standard library: fake_driver_root copies this file into the driver root behind a shebang naming
this interpreter, and the driver runs it as a separate process, exactly as it runs the real tool. It follows
the real tool's command line (NVIDIA MPS documentation, "nvidia-cuda-mps-control") and what the 580.159.04
binary was seen to do (docs/hardware-validation.md, "MPS control daemon"):

- `-d` daemonises (fork, setsid, fork) and returns 0 at once, before the daemon listens. The daemon writes
  `nvidia-cuda-mps-control.pid` into CUDA_MPS_PIPE_DIRECTORY next to the unix sockets `control` (0666) and
  `control_privileged` (0755), `control_lock` and the FIFO `log`, and `control.log` plus an empty `server.log`
  into CUDA_MPS_LOG_DIRECTORY, lines as `[2026-11-26 13:54:33.643 Control   879] Cmd:get_server_list`.
  A second daemon on the same pipe directory is refused. `-f` runs the same daemon in the foreground.
- without arguments it is the client: each line on standard input is one command sent to the daemon of
  CUDA_MPS_PIPE_DIRECTORY, its answer printed. Every answered command exits 0, an unknown or malformed one
  included (it prints `Unknown command "<name>"`); only no daemon there is an error (exit status 1).
- commands: `quit` (logs `Exit with status 0`), `get_server_list` (nothing: no server runs),
  `set_default_active_thread_percentage <p>` (prints the value as `50.0`), `get_default_active_thread_percentage`
  (`100.0` unset), `set_default_device_pinned_mem_limit <dev> <value>` (prints nothing; value an integer followed
  by M or G), `get_default_device_pinned_mem_limit <dev>` (nothing unset, else from 1024M on in whole G, truncated,
  below in M: `8192M` is shown as `8G`, `40779M` as `39G`, `500M` as `500M`, as the 580 binary shows them). A limit
  is kept per identifier as given: set by UUID, asking by ordinal prints nothing.
  Answers to a bad argument (`Invalid ...`) are this stand-in's own wording: the real one's were not recorded.

A test may make the daemon behave as another driver's binary: `<this file>.quirks` (read at start) holds lines
`<command> unknown` (answered `Unknown command`, as by a binary without it) or `<command> ignored` (answered as
usual, but nothing changes: a setting that did not take), or `start slow` (the daemon writes its PID file and
listens only SLOW_START_S after `-d` returned).

Defaults as documented: pipe directory /tmp/nvidia-mps, log directory /var/log/nvidia-mps, percentage 100.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import socket
import sys
import time

PID_FILE = "nvidia-cuda-mps-control.pid"
SLOW_START_S = 1.0
SOCKET = "control"
PRIVILEGED_SOCKET = "control_privileged"
LOCK = "control_lock"
FIFO = "log"
LOG = "control.log"
SERVER_LOG = "server.log"
QUIRKS_SUFFIX = ".quirks"
LIMIT = re.compile(r"^([0-9]+)([MG])\Z")
_MIB = {"M": 1, "G": 1024}


def _pipe_dir() -> str:
    return os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps"


def _log_dir() -> str:
    return os.environ.get("CUDA_MPS_LOG_DIRECTORY") or "/var/log/nvidia-mps"


def _quirks() -> dict[str, str]:
    """command -> "unknown" | "ignored", from the file beside this binary (none: the real 580 behaviour)."""
    try:
        with open(os.path.abspath(__file__) + QUIRKS_SUFFIX) as handle:
            return {words[0]: words[1] for words in (line.split() for line in handle) if len(words) == 2}
    except OSError:
        return {}


def _running(pipe_dir: str) -> int | None:
    try:
        with open(os.path.join(pipe_dir, PID_FILE)) as handle:
            pid = int(handle.read().strip() or "0")
    except (OSError, ValueError):
        return None
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return None
    return pid if pid > 0 and state != "Z" else None  # a zombie (nobody reaped it yet) is a daemon that died


def _shown(mib: int) -> str:
    """A limit as the real daemon (580) prints it: from 1024M on in whole G, truncated (40779M is 39G), below in M."""
    return f"{mib // 1024}G" if mib >= 1024 else f"{mib}M"


class Daemon:
    def __init__(self, pipe_dir: str, log_dir: str) -> None:
        self.pipe_dir, self.log_dir = pipe_dir, log_dir
        self.devices = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
        self.percentage = "100.0"
        self.limits: dict[str, str] = {}  # by the identifier given (ordinal or UUID), as the real daemon keeps them
        self.quirks = _quirks()
        self.log_file = open(os.path.join(log_dir, LOG), "a", buffering=1)  # noqa: SIM115 - open for the daemon's life
        open(os.path.join(log_dir, SERVER_LOG), "a").close()  # the server's log: empty while no server runs

    def log(self, text: str) -> None:
        now = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
        self.log_file.write(f"[{stamp} Control {os.getpid():>5}] {text}\n")

    def known_device(self, name: str) -> bool:
        return (name.isdigit() and int(name) < len(self.devices)) or name in self.devices

    def answer(self, line: str) -> tuple[str, bool]:
        """(reply, quit?) for one command line."""
        words = line.split()
        self.log(f"Cmd:{line}")
        if not words:
            return "", False
        command, args = words[0], words[1:]
        quirk = self.quirks.get(command)
        if quirk == "unknown":
            return f'Unknown command "{command}"', False
        return self._command(command, args, keep=quirk != "ignored")

    def _command(self, command: str, args: list[str], keep: bool) -> tuple[str, bool]:
        if command == "quit" and not args:
            return "", True
        if command == "get_server_list" and not args:
            return "", False
        if command == "get_default_active_thread_percentage" and not args:
            return self.percentage, False
        if command == "set_default_active_thread_percentage" and len(args) == 1:
            try:
                value = float(args[0])
            except ValueError:
                value = -1.0
            if not 0 <= value <= 100:
                return f"Invalid percentage {args[0]}", False
            if keep:
                self.percentage = f"{value:.1f}"
            return self.percentage, False
        if command == "get_default_device_pinned_mem_limit" and len(args) == 1:
            return self.limits.get(args[0], ""), False
        if command == "set_default_device_pinned_mem_limit" and len(args) == 2:
            if not self.known_device(args[0]):
                return f"Invalid device {args[0]}", False
            match = LIMIT.match(args[1])
            if match is None:
                return f"Invalid memory limit {args[1]}", False
            if keep:
                self.limits[args[0]] = _shown(int(match[1]) * _MIB[match[2]])
            return "", False
        return f'Unknown command "{command}"', False

    def serve(self) -> None:
        if self.quirks.get("start") == "slow":
            time.sleep(SLOW_START_S)  # a daemon that takes its time: nothing in the pipe directory names it yet
        os.chdir(self.pipe_dir)  # the sockets by their relative names: deep pipe directories exceed sun_path
        lock = os.open(LOCK, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(FIFO):
            os.mkfifo(FIFO, 0o644)
        listeners = [_listen(SOCKET, 0o666), _listen(PRIVILEGED_SOCKET, 0o755)]
        with open(PID_FILE + ".tmp", "w") as handle:
            handle.write(f"{os.getpid()}\n")
        os.replace(PID_FILE + ".tmp", PID_FILE)
        self.log(f"Starting control daemon using socket {os.path.join(self.pipe_dir, SOCKET)}")
        self.log(f"To connect CUDA applications to this daemon, set env CUDA_MPS_PIPE_DIRECTORY={self.pipe_dir}")
        stop = False
        while not stop:
            ready, _, _ = select.select(listeners, [], [])
            connection, _ = ready[0].accept()
            with connection:
                line = connection.makefile("r").readline().strip()
                reply, stop = self.answer(line)
                connection.sendall((reply + "\n").encode() if reply else b"")
        self.log("Exit with status 0")
        for listener in listeners:
            listener.close()
        for name in (SOCKET, PRIVILEGED_SOCKET, PID_FILE):
            try:
                os.unlink(name)
            except OSError:
                pass


def _listen(name: str, mode: int) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.lexists(name):
        os.unlink(name)
    server.bind(name)
    os.chmod(name, mode)
    server.listen(8)
    return server


def _daemonise(run: Daemon) -> int:
    """Fork, setsid, fork; the caller returns 0 at once, as the real -d does (the daemon comes up after)."""
    child = os.fork()
    if child > 0:
        os.waitpid(child, 0)
        return 0
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    try:
        run.serve()
    finally:
        os._exit(0)


def _client() -> int:
    pipe_dir = _pipe_dir()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                os.chdir(pipe_dir)
                connection.connect(SOCKET)
                connection.sendall((line + "\n").encode())
                connection.shutdown(socket.SHUT_WR)
                reply = connection.makefile("r").read()
        except OSError:
            print("Cannot find MPS control daemon process", file=sys.stderr)
            return 1
        if reply:
            print(reply, end="" if reply.endswith("\n") else "\n")
    return 0  # whatever the daemon answered: the real client's exit status never tells a refused command


def main(argv: list[str]) -> int:
    if not argv:
        return _client()
    if argv[0] not in ("-d", "-f") or len(argv) > 1:
        print("Usage: nvidia-cuda-mps-control [-d | -f]", file=sys.stderr)
        return 1
    pipe_dir, log_dir = _pipe_dir(), _log_dir()
    for directory in (pipe_dir, log_dir):
        os.makedirs(directory, exist_ok=True)
    if _running(pipe_dir) is not None:
        print("An instance of this daemon is already running", file=sys.stderr)
        return 1
    run = Daemon(pipe_dir, log_dir)
    if argv[0] == "-f":
        run.serve()
        return 0
    return _daemonise(run)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
