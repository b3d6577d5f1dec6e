"""A stand-in for `nvidia-cuda-mps-control`, installed into simulated driver roots as that binary.

Only the standard library: fake_driver_root copies this file into the driver root behind a shebang naming
this interpreter, and the driver runs it as a separate process, exactly as it runs the real tool. It
follows the real tool's process lifecycle and command line (NVIDIA MPS documentation, "nvidia-cuda-mps-control"):

- `-d` daemonises (fork, setsid, fork), writes `nvidia-cuda-mps-control.pid` into CUDA_MPS_PIPE_DIRECTORY and
  `control.log` into CUDA_MPS_LOG_DIRECTORY, and listens on the unix socket `control` in the pipe directory;
  a second daemon on the same pipe directory is refused. `-f` runs the same daemon in the foreground.
- without arguments it is the client: each line on standard input is one command sent to the daemon of
  CUDA_MPS_PIPE_DIRECTORY, its answer printed; no daemon there is an error (exit status 1).
- commands: `quit`, `get_server_list`, `set_default_active_thread_percentage <percentage>`,
  `get_default_active_thread_percentage`, `set_default_device_pinned_mem_limit <dev> <value>` (value an integer
  followed by M or G; dev an ordinal or UUID of CUDA_VISIBLE_DEVICES as the daemon saw it),
  `get_default_device_pinned_mem_limit <dev>`. Anything else is answered as an unknown command.

Defaults as documented: pipe directory /tmp/nvidia-mps, log directory /var/log/nvidia-mps, percentage 100.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time

PID_FILE = "nvidia-cuda-mps-control.pid"
SOCKET = "control"
LOG = "control.log"
LIMIT = re.compile(r"^[0-9]+[MG]\Z")


def _pipe_dir() -> str:
    return os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps"


def _log_dir() -> str:
    return os.environ.get("CUDA_MPS_LOG_DIRECTORY") or "/var/log/nvidia-mps"


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


class Daemon:
    def __init__(self, pipe_dir: str, log_dir: str) -> None:
        self.pipe_dir, self.log_dir = pipe_dir, log_dir
        self.devices = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
        self.percentage = "100.0"
        self.limits: dict[str, str] = {}
        self.log_file = open(os.path.join(log_dir, LOG), "a", buffering=1)  # noqa: SIM115 - open for the daemon's life

    def log(self, text: str) -> None:
        self.log_file.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')} Control {os.getpid()}] {text}\n")

    def device(self, name: str) -> str | None:
        if name.isdigit() and int(name) < len(self.devices):
            return self.devices[int(name)]
        return name if name in self.devices else None

    def answer(self, line: str) -> tuple[str, bool]:
        """(reply, quit?) for one command line."""
        words = line.split()
        self.log(f"Cmd:{line}")
        if not words:
            return "", False
        command, args = words[0], words[1:]
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
            self.percentage = f"{value:.1f}"
            return self.percentage, False
        if command in ("set_default_device_pinned_mem_limit", "get_default_device_pinned_mem_limit"):
            setting = command.startswith("set")
            if len(args) != (2 if setting else 1):
                return f"Usage: {command} <dev>{' <value>' if setting else ''}", False
            device = self.device(args[0])
            if device is None:
                return f"Invalid device {args[0]}", False
            if not setting:
                return self.limits.get(device, "0M"), False
            if not LIMIT.match(args[1]):
                return f"Invalid memory limit {args[1]}: use an integer followed by M or G", False
            self.limits[device] = args[1]
            return "", False
        return f"Unrecognized command {line}", False

    def serve(self) -> None:
        os.chdir(self.pipe_dir)  # the socket by its relative name: deep pipe directories exceed sun_path
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            if os.path.lexists(SOCKET):
                os.unlink(SOCKET)
            server.bind(SOCKET)
            server.listen(8)
            with open(PID_FILE + ".tmp", "w") as handle:
                handle.write(f"{os.getpid()}\n")
            os.replace(PID_FILE + ".tmp", PID_FILE)
            self.log(f"Starting control daemon using socket {os.path.join(self.pipe_dir, SOCKET)}")
            self.log(f"To connect CUDA applications to this daemon, set env CUDA_MPS_PIPE_DIRECTORY={self.pipe_dir}")
            while True:
                connection, _ = server.accept()
                with connection:
                    line = connection.makefile("r").readline().strip()
                    reply, stop = self.answer(line)
                    connection.sendall((reply + "\n").encode() if reply else b"")
                if stop:
                    break
        self.log("Exit")
        for name in (SOCKET, PID_FILE):
            try:
                os.unlink(name)
            except OSError:
                pass


def _daemonise(run: Daemon) -> int:
    ready_read, ready_write = os.pipe()
    if os.fork() > 0:
        os.close(ready_write)
        ok = os.read(ready_read, 1) == b"1"  # returns once the daemon listens, as the real -d does
        return 0 if ok else 1
    os.close(ready_read)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    original = run.log

    def first_log(text: str) -> None:
        original(text)
        if text.startswith("To connect"):
            os.write(ready_write, b"1")
            os.close(ready_write)
            run.log = original  # type: ignore[method-assign]

    run.log = first_log  # type: ignore[method-assign]
    try:
        run.serve()
    finally:
        os._exit(0)


def _client() -> int:
    status = 0
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
        if reply.startswith(("Invalid", "Unrecognized", "Usage")):
            status = 1
    return status


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
