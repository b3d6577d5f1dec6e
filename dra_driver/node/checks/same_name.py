"""Another DRA driver under this driver's name on the same node: found, and answered by standing down.

This driver uses NVIDIA's and AMD's driver names on purpose, so their own drivers can run on the node too.
Two signs, each enough:
- a registration socket in <kubelet dir>/plugins_registry whose `GetInfo` names this driver and that none
  of this driver's instances created. An instance's own socket is known by either of two facts, so that losing
  one (a full disk, a wiped directory) never makes this driver's previous pod a
  stranger during a rolling update: the marker each instance writes (`<state dir>/<driver>/registrations/<socket>`,
  holding the socket's inode), or the socket's name `<driver>-<pod UID>-reg.sock` whose pod UID is that of a
  live instance on the same state directory (its `instances/<pod UID>.lock` is flocked: dra_driver.node.plugin.
  instance_lock). A pod UID is unique in the cluster, and only an instance holding that record binds that name;
- a ResourceSlice of this node and driver that someone else wrote: it lacks this driver's label
  (`dra-driver.io/publisher`) and its managedFields name only other managers.
A driver in conflict stops publishing (its own slices are withdrawn, the other driver's are never touched)
and refuses new claims with the reason; claims it prepared before can still be unprepared.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from dra_driver.api.pluginregistration.v1 import api_pb2 as reg_pb2
from dra_driver.api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from dra_driver.common import atomic_file, node_file
from dra_driver.common.logs import fields
from dra_driver.model.names import uid_problem
from dra_driver.common import file_modes
from dra_driver.node.metrics import Metrics
from dra_driver.node.plugin.instance_lock import live_record
from dra_driver.node.plugin.storage_errors import cause

log = logging.getLogger(__name__)

OWNER_LABEL = "dra-driver.io/publisher"
OWNER_VALUE = "dra-driver"
FIELD_MANAGER = "dra-driver"
_MARKERS = "registrations"
_MAX_MARKER_BYTES = 64  # an inode number
_PROBE_TIMEOUT_S = 1.0


def marker_dir(state_root: Path) -> Path:
    return state_root / _MARKERS


def mark_registration(state_root: Path, socket: Path) -> None:
    """Record that this driver created `socket` (its inode), so other instances do not take it for a stranger's.
    Best effort: a marker that cannot be written (a full disk) is logged; the instance lock still names the socket."""
    directory = marker_dir(state_root)
    try:
        file_modes.make_dirs(directory, file_modes.PRIVATE_DIR)
        atomic_file.replace_file(directory / socket.name, f"{socket.stat().st_ino}\n".encode(), durable=False, mode=file_modes.PRIVATE_FILE)
    except OSError as exc:
        log.error(
            "cannot record this instance's registration socket; other instances still know it by the instance lock",
            extra=fields(directory=str(directory), socket=socket.name, error=cause(exc)),
        )


def unmark_registration(state_root: Path, socket: Path) -> None:
    try:
        (marker_dir(state_root) / socket.name).unlink()
    except FileNotFoundError:
        pass


def created_here(state_root: Path, socket: Path, driver: str) -> bool:
    """True when an instance of this driver created `socket`: its marker names the socket's inode, or the pod UID
    in its name is a live instance's on this state directory."""
    return _marked(state_root, socket) or _live_instance_socket(state_root, socket, driver)


def _marked(state_root: Path, socket: Path) -> bool:
    try:
        recorded = node_file.read_regular(marker_dir(state_root) / socket.name, _MAX_MARKER_BYTES).decode().strip()
        return recorded == str(socket.stat().st_ino)
    except (OSError, ValueError):
        return False


def _live_instance_socket(state_root: Path, socket: Path, driver: str) -> bool:
    pod_uid = socket.name[len(driver) + 1 : -len("-reg.sock")] if socket.name.startswith(f"{driver}-") else ""
    if not pod_uid or uid_problem(pod_uid) is not None:
        return False  # the plain name: an instance without --pod-uid is alone on its state directory, never beside us
    return live_record(state_root, pod_uid)


@dataclass(frozen=True)
class Registration:
    socket: Path
    endpoint: str
    answered: bool  # False: a socket file nobody serves (a stale leftover; the kubelet ignores it)


def same_name_registrations(kubelet_dir: Path, driver: str, state_root: Path) -> list[Registration]:
    """Registration sockets for `driver` that no instance of this driver created."""
    registry = kubelet_dir / "plugins_registry"
    try:
        candidates = sorted(p for p in registry.iterdir() if p.name.startswith(f"{driver}-") and p.name.endswith("-reg.sock"))
    except OSError:
        return []
    found = []
    for socket in candidates:
        if created_here(state_root, socket, driver):
            continue
        info = plugin_info(socket)
        if info is None:
            found.append(Registration(socket, "", answered=False))
        elif info.name == driver and info.type == "DRAPlugin":
            found.append(Registration(socket, info.endpoint, answered=True))
    return found


def plugin_info(socket: Path) -> Any:
    """The PluginInfo a registration socket answers with (GetInfo only, as a probe), or None when nobody answers."""
    try:
        with grpc.insecure_channel(f"unix://{socket.absolute()}") as channel:
            return reg_grpc.RegistrationStub(channel).GetInfo(reg_pb2.InfoRequest(), timeout=_PROBE_TIMEOUT_S)
    except grpc.RpcError:
        return None


def written_by_other(slice_object: Mapping[str, Any]) -> bool:
    """A slice of this node and driver that another driver wrote (see the module docstring)."""
    metadata = slice_object.get("metadata") or {}
    if (metadata.get("labels") or {}).get(OWNER_LABEL) == OWNER_VALUE:
        return False
    managers = {str(entry.get("manager")) for entry in metadata.get("managedFields") or [] if isinstance(entry, Mapping)}
    # No label and no managedFields (servers that do not track field ownership): nothing says it is another's.
    return bool(managers) and FIELD_MANAGER not in managers


def describe_foreign(slices: Iterable[Mapping[str, Any]]) -> str:
    parts = []
    for item in slices:
        metadata = item.get("metadata") or {}
        managers = sorted({str(e.get("manager")) for e in metadata.get("managedFields") or [] if isinstance(e, Mapping)})
        parts.append(f"{metadata.get('name')} (written by {', '.join(managers) or 'unknown'})")
    return ", ".join(parts)


def conflict_message(driver: str, node: str, what: str) -> str:
    return (
        f"another DRA driver named {driver} runs on node {node} ({what}); this driver stopped publishing and refuses new "
        f"claims instead of fighting over the pool: run only one {driver} driver on the node (remove the other, or this one)"
    )


class ConflictBoard:
    """Per driver and source ("registration", "slices"): the same-name conflict found, if any. The daemon's
    registration check and the publisher set it; the publisher and prepare read it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conflicts: dict[tuple[str, str], str] = {}
        self._metrics: Metrics | None = None
        self._listeners: dict[str, list[Callable[[], None]]] = {}

    def subscribe(self, driver: str, listener: Callable[[], None]) -> None:
        """Call `listener` after any change of `driver`'s conflicts (the publisher looks again at once)."""
        with self._lock:
            self._listeners.setdefault(driver, []).append(listener)

    def unsubscribe(self, driver: str, listener: Callable[[], None]) -> None:
        with self._lock:
            listeners = self._listeners.get(driver, [])
            if listener in listeners:
                listeners.remove(listener)

    def use_metrics(self, metrics: Metrics) -> None:
        """Each conflict found counts once in dra_driver_errors_total{operation="same-name-driver"}."""
        self._metrics = metrics

    def set(self, driver: str, source: str, message: str | None) -> bool:
        """Record (or clear, with None) one source's conflict; True when that changed it (logged here, once)."""
        key = (driver, source)
        with self._lock:
            previous = self._conflicts.get(key)
            if message is None:
                self._conflicts.pop(key, None)
            else:
                self._conflicts[key] = message
        if previous == message:
            return False
        with self._lock:
            listeners = list(self._listeners.get(driver, []))
        for listener in listeners:
            listener()
        if message is not None:
            log.error("same-name DRA driver on this node; not publishing", extra=fields(driver=driver, source=source, problem=message))
            if self._metrics is not None:
                self._metrics.errors.labels(driver, "same-name-driver").inc()
        else:
            log.warning("the other same-name DRA driver is gone", extra=fields(driver=driver, source=source))
        return True

    def get(self, driver: str) -> str | None:
        with self._lock:
            return next((m for (d, _), m in sorted(self._conflicts.items()) if d == driver), None)
