"""Socket paths of a driver instance and gRPC servers on unix sockets.

Paths follow the reference helper (kubeletplugin draplugin.go / endpoint.go, docs/sources.md); with a pod
UID every instance gets its own socket names so two driver pods can overlap
during a rolling update, and they serialize claim operations through file
locks in the shared state directory.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc

from dra_driver.errors import DraError
from dra_driver.logs import fields

log = logging.getLogger(__name__)

DEFAULT_KUBELET_DIR = Path("/var/lib/kubelet")
# Runtime state (checkpoint, locks, backend records): a tmpfs on nodes, cleared by a reboot that voids it anyway.
DEFAULT_STATE_DIR = Path("/var/run/dra-driver")
_MAX_SOCKET_PATH = 107  # sun_path is 108 bytes including the terminating NUL


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
        """The checkpoint directory: one record file per claim (dra_driver.checkpoint, format 2)."""
        return self.state_root / "checkpoint.d"

    @property
    def earlier_checkpoint(self) -> Path | None:
        """Where builds without a state dir kept the checkpoint (beside the socket); its records are moved on load."""
        return self.plugin_dir / "checkpoint.d" if self.state_root != self.plugin_dir else None

    @property
    def legacy_checkpoint(self) -> Path:
        """The format-1 single-file checkpoint of older releases, migrated on load."""
        return self.plugin_dir / "checkpoint.json"


class SocketError(DraError):
    pass


class UnixServer:
    """A gRPC server bound to one unix socket it owns; stop() removes that socket and nothing else."""

    def __init__(self, path: Path, register: Callable[[grpc.Server], None], workers: int, name: str) -> None:
        self.path = path.absolute()
        self._register = register
        self._workers = workers
        self._name = name
        self._server: grpc.Server | None = None
        self._inode: int | None = None

    def start(self) -> None:
        if len(str(self.path)) > _MAX_SOCKET_PATH:
            raise SocketError(f"socket path {self.path} is {len(str(self.path))} bytes; unix sockets allow {_MAX_SOCKET_PATH}: use a shorter --kubelet-dir")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(self.path)
        server = grpc.server(ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix=self._name), options=[("grpc.so_reuseport", 0)])
        self._register(server)
        if server.add_insecure_port(f"unix://{self.path}") == 0:
            raise SocketError(f"cannot listen on {self.path}")
        server.start()
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


def _remove_stale(path: Path) -> None:
    """Remove a leftover socket at our own path (a crashed earlier run); refuse to delete other files."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise SocketError(f"{path} exists and is not a socket; remove it or choose another --kubelet-dir")
    os.unlink(path)
    log.info("removed stale socket", extra=fields(socket=str(path)))
