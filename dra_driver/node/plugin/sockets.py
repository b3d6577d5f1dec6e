"""Socket paths of a driver instance, the directories it creates, and gRPC servers on unix sockets.

Paths follow the reference helper (kubeletplugin draplugin.go / endpoint.go, docs/sources.md); with a pod
UID every instance gets its own socket names so two driver pods can overlap
during a rolling update, and they serialize claim operations through file
locks in the shared state directory (which only such instances may share:
dra_driver.node.plugin.instance_lock).
"""

from __future__ import annotations

import logging
import os
import socket
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc

from dra_driver.common import file_modes
from dra_driver.common.errors import DraError
from dra_driver.common.logs import fields

log = logging.getLogger(__name__)

# sun_path holds 108 bytes with the terminating NUL, but gRPC core (1.85) refuses to bind a path of more than 105
# ("should not have more than 107 characters", counted with its own prefix): this is the limit that holds.
MAX_SOCKET_PATH = 105


@dataclass(frozen=True)
class PluginPaths:
    """Where a driver instance keeps its sockets (under the kubelet dir, which the kubelet dials) and its
    runtime state: checkpoint and locks, under `state_dir/<driver>` (a tmpfs such as /var/run on a node:
    the state is void after a reboot anyway) or, without a state dir, beside the DRA socket."""

    kubelet_dir: Path
    driver: str
    pod_uid: str | None = None
    state_dir: Path | None = None

    @property
    def registry_dir(self) -> Path:
        return self.kubelet_dir / "plugins_registry"

    @property
    def plugin_dir(self) -> Path:
        return self.kubelet_dir / "plugins" / self.driver

    @property
    def registration_socket(self) -> Path:
        suffix = f"-{self.pod_uid}" if self.pod_uid else ""
        return self.registry_dir / f"{self.driver}{suffix}-reg.sock"

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / (f"dra-{self.pod_uid}.sock" if self.pod_uid else "dra.sock")

    @property
    def state_root(self) -> Path:
        """The directory of this driver's checkpoint and lock files, shared by all its instances on the node."""
        return self.state_dir / self.driver if self.state_dir is not None else self.plugin_dir

    @property
    def serialize_lock(self) -> Path | None:
        """Only rolling-update mode shares state between instances and needs the file lock."""
        return self.state_root / "serialize.lock" if self.pod_uid else None

    @property
    def claim_locks_dir(self) -> Path | None:
        """Per-claim lock files (rolling-update mode): claims of different UIDs never wait for each other."""
        return self.state_root / "claims" if self.pod_uid else None

    @property
    def publisher_lease(self) -> Path:
        """Whoever holds the flock on this file is the one instance publishing this driver's slices."""
        return self.state_root / "publisher.lock"

    @property
    def checkpoint(self) -> Path:
        """The checkpoint directory: one record file per claim (dra_driver.node.checkpoint, format 2)."""
        return self.state_root / "checkpoint.d"

    @property
    def sockets(self) -> tuple[Path, Path]:
        return (self.dra_socket, self.registration_socket)

    def check_socket_paths(self) -> None:
        """Both sockets fit in sun_path (SocketError otherwise): checked before recovery or anything else runs."""
        for path in self.sockets:
            check_socket_path(path)

    def make_dirs(self, cdi_dir: Path) -> None:
        """Every directory this instance writes in, with the modes of dra_driver.common.file_modes, whatever the umask;
        DraError naming the directory when one cannot be made."""
        try:
            self._make_dirs(cdi_dir)
        except OSError as exc:
            where = exc.filename or cdi_dir
            raise DraError(f"cannot make the driver's directory {where}: {exc.strerror or exc}; it must be a directory the driver can write") from exc

    def _make_dirs(self, cdi_dir: Path) -> None:
        if self.state_dir is not None:
            file_modes.shared_dir(self.state_dir, file_modes.PRIVATE_DIR)  # named by a flag: could be any directory
        file_modes.own_dir(self.plugin_dir, file_modes.PLUGIN_DIR)
        file_modes.shared_dir(self.registry_dir, file_modes.PLUGIN_DIR)
        for private in self._private_dirs():
            if not _something_else_at(private):  # a file or link in a directory's place is the checkpoint's damage to handle
                file_modes.own_dir(private)
        file_modes.shared_dir(cdi_dir, file_modes.CDI_DIR)

    def _private_dirs(self) -> list[Path]:
        dirs = [self.state_root] if self.state_root != self.plugin_dir else []
        return dirs + [self.checkpoint] + ([self.claim_locks_dir] if self.claim_locks_dir is not None else [])

    def expectations(self, cdi_dir: Path) -> list[file_modes.Expectation]:
        """What each directory and socket of this instance should look like (`file_modes.check` each one)."""
        expected = [file_modes.Expectation(self.state_dir, file_modes.PRIVATE_DIR, "state dir", exact=False)] if self.state_dir is not None else []
        expected += [file_modes.Expectation(path, file_modes.PRIVATE_DIR, "driver state dir") for path in self._private_dirs()]
        expected += [
            file_modes.Expectation(self.plugin_dir, file_modes.PLUGIN_DIR, "kubelet plugin dir"),
            file_modes.Expectation(self.registry_dir, file_modes.PLUGIN_DIR, "kubelet plugin registry", exact=False),
            file_modes.Expectation(cdi_dir, file_modes.CDI_DIR, "CDI dir", exact=False),
            file_modes.Expectation(self.dra_socket, file_modes.SOCKET, "DRA socket"),
            file_modes.Expectation(self.registration_socket, file_modes.SOCKET, "registration socket"),
        ]
        return expected


def _something_else_at(path: Path) -> bool:
    try:
        return not stat.S_ISDIR(path.lstat().st_mode)
    except FileNotFoundError:
        return False


class SocketError(DraError):
    pass


def check_socket_path(path: Path) -> None:
    """Refuse a socket path gRPC cannot bind (MAX_SOCKET_PATH), before anything else runs."""
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH:
        raise SocketError(
            f"socket path {path} is {size} bytes; gRPC binds unix sockets of at most {MAX_SOCKET_PATH}: use a shorter --kubelet-dir (or a shorter "
            "--pod-uid)"
        )


class UnixServer:
    """A gRPC server bound to one unix socket it owns; stop() removes that socket and nothing else.

    gRPC unlinks its socket path before it binds and again when it stops, whoever owns the path by then. So the
    server binds a private dot-name in the same directory (the kubelet ignores dot-names), which gRPC may
    unlink as it likes, and the public path is a hard link to it made with link(2), which never replaces an
    existing file: a live server's socket is never bound over, and stopping never removes another's.
    """

    def __init__(self, path: Path, register: Callable[[grpc.Server], None], workers: int, name: str) -> None:
        self.path = path.absolute()
        self._register = register
        self._workers = workers
        self._name = name
        self._server: grpc.Server | None = None
        self._inode: int | None = None

    def start(self) -> None:
        check_socket_path(self.path)
        file_modes.make_dirs(self.path.parent, file_modes.PLUGIN_DIR)
        _remove_stale(self.path)
        private = _private_path(self.path)
        server = grpc.server(ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix=self._name), options=[("grpc.so_reuseport", 0)])
        self._register(server)
        try:
            bound = server.add_insecure_port(f"unix://{private}")
        except RuntimeError as exc:  # newer gRPC raises where older returned 0
            raise SocketError(f"cannot listen on {private} (for {self.path}): {exc}") from exc
        if bound == 0:
            raise SocketError(f"cannot listen on {private} (for {self.path})")
        server.start()
        try:
            os.chmod(private, file_modes.SOCKET)  # before it is reachable by its public name, whatever the umask
            os.link(private, self.path)
        except FileExistsError:
            server.stop(0).wait()
            raise SocketError(f"{self.path} was created by another process while this one started; {_LIVE_FIX}") from None
        except BaseException:
            server.stop(0).wait()
            raise
        finally:
            _unlink_quietly(private)
        self._server = server
        self._inode = self.path.stat().st_ino
        log.info("serving", extra=fields(server=self._name, socket=str(self.path)))

    def stop(self, grace: float = 1.0) -> None:
        if self._server is None:
            return
        self._remove_own_socket()  # first, so the kubelet stops sending new calls
        self._server.stop(grace).wait()
        self._server = None

    def _remove_own_socket(self) -> None:
        try:
            if self.path.stat().st_ino == self._inode:
                self.path.unlink()
        except FileNotFoundError:
            pass


_LIVE_FIX = "stop the other driver instance, or give each instance its own --pod-uid (rolling update) or --kubelet-dir"


def _private_path(path: Path) -> Path:
    """A random dot-name beside `path`, never longer than its name, so it fits wherever `path` fits."""
    name = "." + os.urandom(8).hex()[: max(1, min(15, len(path.name) - 1))]
    return path.with_name(name)


def _answers(path: Path) -> bool:
    """Whether a process accepts connections on the socket at `path`; anything but "refused" counts as alive."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError:
        return True  # not allowed, backlog full, timed out: someone may be there
    finally:
        probe.close()
    return True


def _remove_stale(path: Path) -> None:
    """Remove a leftover socket at our own path (a crashed earlier run); refuse a live one and any other file.

    The probed socket is first renamed aside and removed only if it is still the one probed: a server that
    linked its socket there in between gets it back."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise SocketError(f"{path} exists and is not a socket; remove it or choose another --kubelet-dir")
    if _answers(path):
        raise SocketError(f"{path} is served by a live process; {_LIVE_FIX}")
    aside = _private_path(path)
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    if aside.lstat().st_ino != info.st_ino:
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
        _unlink_quietly(aside)
        raise SocketError(f"{path} was created by another process while this one started; {_LIVE_FIX}")
    _unlink_quietly(aside)
    log.info("removed stale socket", extra=fields(socket=str(path)))


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
