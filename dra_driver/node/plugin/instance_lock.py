"""One driver instance per state directory, or a refusal that names the holder.

Instances on one state directory share its checkpoint records, claim locks and publisher lease. That is safe
only between rolling-update instances (`--pod-uid`, distinct per pod): they serialize every claim through lock
files and name their sockets after their pod. An instance without `--pod-uid` takes no such locks and uses the
plain socket names, so it must be alone. Two `flock`s (the kernel drops them when the process dies) enforce it:

- `<dir>/instance.lock`: exclusive for an instance without `--pod-uid`, shared for one with it, so two plain
  instances, or a plain and a rolling-update one, never hold it together;
- `<dir>/instances/<pod UID, or "single">.lock`: exclusive, so two instances with the same pod UID (the same
  socket names) never run together; its holder writes who it is (pid, host, pod UID, start time) into it, which
  is how a refused instance, or `holders()`, names it.

Both are taken before anything touches the state: recovery, sockets, publishing. Taking them retries for
`ACQUIRE_WAIT_S`, so a check by `holders()` (a node health command) never makes a starting instance refuse.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from dra_driver.common import json_text, node_file
from dra_driver.node import file_modes
from dra_driver.common.errors import DraError
from dra_driver.common.logs import fields
from dra_driver.model.names import file_stem
from dra_driver.node.plugin.locks import flock_or_close, open_lock_file, open_locked

log = logging.getLogger(__name__)

MODE_LOCK = "instance.lock"
OWNERS_DIR = "instances"
# The record of an instance without --pod-uid. A pod UID "single" would share the name, harmlessly: such an
# instance and one without --pod-uid never hold the mode lock together.
_SINGLE = "single"
ACQUIRE_WAIT_S = 1.0
_POLL_S = 0.05
_RECORD_LIMIT = 4096


class InstanceLockError(DraError):
    """Another live instance holds the state directory in a way this one cannot share."""

    def __init__(self, message: str, holders: list[Holder]) -> None:
        super().__init__(message)
        self.holders = holders


@dataclass(frozen=True)
class Holder:
    """A live instance holding a state directory, as its record says (fields None when it left no readable record)."""

    pod_uid: str | None
    pid: int | None = None
    host: str | None = None
    since: str | None = None
    known: bool = True

    def describe(self) -> str:
        if not self.known:
            return "an instance that left no readable record"
        parts = [f"pid {self.pid}" if self.pid is not None else "unknown pid"]
        if self.host:
            parts.append(f"on host {self.host}")
        parts.append(f"with --pod-uid {self.pod_uid}" if self.pod_uid else "without --pod-uid")
        if self.since:
            parts.append(f"since {self.since}")
        return " ".join(parts)


def owner_name(pod_uid: str | None) -> str:
    return f"{file_stem(pod_uid) if pod_uid else _SINGLE}.lock"


class InstanceLock:
    """Held for the life of an instance; `release` (or the process's end) gives it up."""

    def __init__(self, directory: Path, pod_uid: str | None, mode_fd: int, owner_fd: int) -> None:
        self.directory = directory
        self.pod_uid = pod_uid
        self._mode_fd: int | None = mode_fd
        self._owner_fd: int | None = owner_fd

    @classmethod
    def acquire(cls, directory: Path, pod_uid: str | None, wait_s: float = ACQUIRE_WAIT_S) -> InstanceLock:
        """Lock `directory` for this instance or raise InstanceLockError naming the holder and the fix."""
        file_modes.own_dir(directory / OWNERS_DIR)
        deadline = time.monotonic() + wait_s
        while True:
            mode_fd = _try_mode_lock(directory / MODE_LOCK, shared=pod_uid is not None)
            if mode_fd is not None:
                owner_fd = open_locked(directory / OWNERS_DIR / owner_name(pod_uid), blocking=False)
                if owner_fd is not None:
                    break
                os.close(mode_fd)
            if time.monotonic() >= deadline:
                raise _refusal(directory, pod_uid, mode_busy=mode_fd is None)
            time.sleep(_POLL_S)
        _write_record(owner_fd, pod_uid)
        _remove_dead_records(directory / OWNERS_DIR, keep=owner_name(pod_uid))
        log.info("instance lock taken", extra=fields(state=str(directory), pod_uid=pod_uid or ""))
        return cls(directory, pod_uid, mode_fd, owner_fd)

    def release(self) -> None:
        """Give the state directory up (idempotent): the record goes first, while still locked."""
        if self._owner_fd is not None:
            try:
                os.unlink(self.directory / OWNERS_DIR / owner_name(self.pod_uid))
            except OSError:
                pass  # a record left behind is removed by the next instance
            os.close(self._owner_fd)
            self._owner_fd = None
        if self._mode_fd is not None:
            os.close(self._mode_fd)
            self._mode_fd = None


def holders(directory: Path) -> list[Holder]:
    """The live instances holding `directory`, from their records; empty when none. An instance holding the mode
    lock without a readable record (an instance just starting) is listed as unknown."""
    found: list[Holder] = []
    try:
        entries = sorted((directory / OWNERS_DIR).glob("*.lock"))
    except OSError:
        entries = []
    for path in entries:
        holder = _live_holder(path)
        if holder is not None:
            found.append(holder)
    if not found and _is_held(directory / MODE_LOCK):
        found.append(Holder(pod_uid=None, known=False))
    return found


def _try_mode_lock(path: Path, shared: bool) -> int | None:
    return flock_or_close(open_lock_file(path), (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)


def _is_held(path: Path) -> bool:
    """Whether any process holds a flock on `path` (a shared probe fails only against an exclusive holder, so an
    exclusive probe is used, given back at once)."""
    try:
        fd = node_file.open_regular(path)
    except OSError:  # missing, or a pipe, link or device in its place: no lock of ours
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _live_holder(path: Path) -> Holder | None:
    try:
        fd = node_file.open_regular(path)
    except OSError:  # missing, or a pipe, link or device in its place: no record of a live instance
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # its instance is alive
            try:
                return _parse_record(node_file.read_fd(fd, path, _RECORD_LIMIT))
            except OSError:  # larger than any record: alive, but unnamed
                return Holder(pod_uid=None, known=False)
        return None
    finally:
        os.close(fd)


def _parse_record(raw: bytes) -> Holder:
    try:
        data = json_text.loads(raw)
        pod_uid = data.get("podUID")
        return Holder(
            pod_uid=str(pod_uid) if pod_uid else None,
            pid=int(data["pid"]),
            host=str(data.get("host") or "") or None,
            since=str(data.get("since") or "") or None,
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return Holder(pod_uid=None, known=False)  # still being written, or damaged: alive, but unnamed


def _write_record(fd: int, pod_uid: str | None) -> None:
    since = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "podUID": pod_uid, "since": since}).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, record, 0)


def _remove_dead_records(owners: Path, keep: str) -> None:
    """Records of instances that are gone (killed, or a pod UID of an earlier rollout) so they do not pile up."""
    try:
        entries = [p for p in owners.glob("*.lock") if p.name != keep]
    except OSError:
        return
    for path in entries:
        fd = open_locked(path, blocking=False)
        if fd is None:
            continue  # alive
        try:
            os.unlink(path)  # while locked: an instance that opened it meanwhile notices (inode) and retries
        except OSError:
            pass
        finally:
            os.close(fd)


def _refusal(directory: Path, pod_uid: str | None, mode_busy: bool) -> InstanceLockError:
    found = holders(directory)
    named = "; ".join(h.describe() for h in found) or "an instance that has just exited (start again)"
    where = f"state directory {directory} is in use by another dra-driver instance ({named})"
    if pod_uid is None:
        fix = ("an instance without --pod-uid must be alone on its state directory: stop the other instance, "
               "or run every instance with its own --pod-uid (the pod's UID, $POD_UID) for a rolling update")  # fmt: skip
    elif mode_busy:
        fix = ("that instance runs without --pod-uid and does not serialize claims with others: stop it (delete its pod) "
               "and this one starts; a rollout from such an instance needs the old pod gone first (maxSurge 0)")  # fmt: skip
    else:
        fix = f"it has the same --pod-uid {pod_uid}: each instance needs its own (the pod's metadata.uid through the downward API)"
    return InstanceLockError(f"{where}; {fix}", found)


def holders_under(state_dir: Path) -> dict[str, list[Holder]]:
    """The live instances of every driver under a `--state-dir` (each driver's state is `<state-dir>/<driver>/`),
    by driver name; drivers without a live instance are left out."""
    try:
        roots = sorted(p for p in state_dir.iterdir() if (p / MODE_LOCK).is_file())
    except OSError:
        return {}
    found = {root.name: holders(root) for root in roots}
    return {driver: live for driver, live in found.items() if live}
