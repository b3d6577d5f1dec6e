"""One driver instance per state directory, or a refusal that names the holder.

Instances on one state directory share its checkpoint records, claim locks and publisher lease. That is safe
only between rolling-update instances (`--pod-uid`, distinct per pod): they serialize every claim through lock
files and name their sockets after their pod. An instance without `--pod-uid` takes no such locks and uses the
plain socket names, so it must be alone. Two `flock`s (the kernel drops them when the process dies) enforce it:

- `<dir>/instance.lock`: exclusive for an instance without `--pod-uid`, shared for one with it, so two plain
  instances, or a plain and a rolling-update one, never hold it together;
- `<dir>/instances/<pod UID, or "single">.lock`: exclusive, so two instances with the same pod UID (the same
  socket names) never run together; its holder writes who it is (pid, host, pod UID, start time) and the
  daemon's effective flags into it, which is how a refused instance, or `holders()`, names it, and how
  `dra-driver doctor` checks the node as the running daemon sees it (the flags after $DRA_DRIVER_NODE_NAME, ConfigMap
  and other environment defaults were applied, which /proc/<pid>/cmdline would not show; readable from the
  host and from any container that mounts the state dir, without sharing the daemon's PID namespace).

The mode lock is also taken on the state directory itself (an fd of `<dir>`, shared or exclusive as above): a
file can be deleted from under a live holder (a second instance would then lock a fresh file), the directory
cannot while it holds the checkpoint. A holder re-verifies its files (`InstanceLock.check`): a deleted lock file
or record is made and locked again, a state directory removed or replaced is reported (the daemon refuses new
claims and is not ready). Lock files are opened without following links or blocking (locks.open_lock_file).

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
import stat
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dra_driver.common import json_text, node_file
from dra_driver.common import file_modes
from dra_driver.common.errors import DraError
from dra_driver.common.logs import fields
from dra_driver.model.names import file_stem
from dra_driver.node.plugin.locks import flock_or_close, open_lock_file, open_locked
from dra_driver.node.plugin.storage_errors import cause

log = logging.getLogger(__name__)

MODE_LOCK = "instance.lock"
OWNERS_DIR = "instances"
# The record of an instance without --pod-uid. A pod UID "single" would share the name, harmlessly: such an
# instance and one without --pod-uid never hold the mode lock together.
_SINGLE = "single"
ACQUIRE_WAIT_S = 1.0
_POLL_S = 0.05
_RECORD_LIMIT = 4096
_FLAG_LIMIT = 512  # a longer flag value is not recorded (the whole record must stay under _RECORD_LIMIT)


class InstanceLockError(DraError):
    """Another live instance holds the state directory in a way this one cannot share."""

    def __init__(self, message: str, holders: list[Holder]) -> None:
        super().__init__(message)
        self.holders = holders


class StateDirDamage(DraError):
    """Something in the state directory is not what the driver made there, and moving it aside could lose data."""


@dataclass(frozen=True)
class Holder:
    """A live instance holding a state directory, as its record says (fields None when it left no readable record)."""

    pod_uid: str | None
    pid: int | None = None
    host: str | None = None
    since: str | None = None
    known: bool = True
    flags: dict[str, str] = field(default_factory=dict)  # the daemon's effective flags (`--profile` -> `dgx-h100`)

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

    def __init__(self, directory: Path, pod_uid: str | None, dir_fd: int, mode_fd: int, owner_fd: int) -> None:
        self.directory = directory
        self.pod_uid = pod_uid
        self._dir_fd: int | None = dir_fd
        self._mode_fd: int | None = mode_fd
        self._owner_fd: int | None = owner_fd
        self._guard = threading.Lock()  # check (the daemon's loop) vs. release (stop)
        self._flags: dict[str, str] = {}

    @classmethod
    def acquire(cls, directory: Path, pod_uid: str | None, wait_s: float = ACQUIRE_WAIT_S, flags: Mapping[str, str] | None = None) -> InstanceLock:
        """Lock `directory` for this instance or raise InstanceLockError naming the holder and the fix; `flags` (the
        daemon's effective flags) go into the record for `holders()`."""
        _owners_dir(directory)
        shared = pod_uid is not None
        deadline = time.monotonic() + wait_s
        while True:
            held = _try_all(directory, pod_uid, shared)
            if isinstance(held, tuple):
                break
            if time.monotonic() >= deadline:
                raise _refusal(directory, pod_uid, mode_busy=held)
            time.sleep(_POLL_S)
        dir_fd, mode_fd, owner_fd = held
        kept_flags = dict(flags or {})
        _write_record(owner_fd, pod_uid, directory, kept_flags)
        _remove_dead_records(directory / OWNERS_DIR, keep=owner_name(pod_uid))
        log.info("instance lock taken", extra=fields(state=str(directory), pod_uid=pod_uid or ""))
        lock = cls(directory, pod_uid, dir_fd, mode_fd, owner_fd)
        lock._flags = kept_flags  # written again with the record when check() remakes it
        return lock

    def check(self) -> str | None:
        """Re-verify what this instance holds: a lock file or record deleted under it is made and locked again;
        None when all is held, else why the instance must not take new claims (its state directory is gone)."""
        with self._guard:
            if self._dir_fd is None or self._mode_fd is None or self._owner_fd is None:
                return None  # released
            if not _same_file(self.directory, self._dir_fd):
                return (f"state directory {self.directory} was removed or replaced while this instance held it (its checkpoint "
                        "with it): new claims are refused; restart the driver so it recovers from what is there now")  # fmt: skip
            mode_path, owner_path = self.directory / MODE_LOCK, self.directory / OWNERS_DIR / owner_name(self.pod_uid)
            if not _same_file(mode_path, self._mode_fd):
                fd = _try_mode_lock(mode_path, shared=self.pod_uid is not None)
                if fd is None:
                    return f"{mode_path} was replaced by one another instance holds: stop the other instance"
                os.close(self._mode_fd)
                self._mode_fd = fd
                log.warning("instance lock file was removed; made and locked again", extra=fields(path=str(mode_path)))
            if not _same_file(owner_path, self._owner_fd):
                try:
                    _owners_dir(self.directory)
                    fd = open_locked(owner_path, blocking=False)
                except (OSError, DraError) as exc:
                    return f"cannot make this instance's record {owner_path} again: {exc}"
                if fd is None:
                    return f"{owner_path} was replaced by one another instance holds: each instance needs its own --pod-uid"
                os.close(self._owner_fd)
                self._owner_fd = fd
                _write_record(fd, self.pod_uid, self.directory, self._flags)
                log.warning("instance record was removed; written again", extra=fields(path=str(owner_path)))
            return None

    def release(self) -> None:
        """Give the state directory up (idempotent): the record goes first, while still locked."""
        with self._guard:
            if self._owner_fd is not None:
                try:
                    if _same_file(self.directory / OWNERS_DIR / owner_name(self.pod_uid), self._owner_fd):
                        os.unlink(self.directory / OWNERS_DIR / owner_name(self.pod_uid))
                except OSError:
                    pass  # a record left behind is removed by the next instance
                os.close(self._owner_fd)
                self._owner_fd = None
            for name in ("_mode_fd", "_dir_fd"):
                fd = getattr(self, name)
                if fd is not None:
                    os.close(fd)
                    setattr(self, name, None)


def _owners_dir(directory: Path) -> None:
    """`<dir>/instances`, made when missing; anything else in its place is refused with the fix."""
    owners = directory / OWNERS_DIR
    try:
        info = os.lstat(owners)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISDIR(info.st_mode):
        what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "a regular file" if stat.S_ISREG(info.st_mode) else "a special file"
        raise StateDirDamage(
            f"{owners} is {what}, not a directory: the driver keeps its instance records there; move it away "
            f"(mv {owners} {owners}.bad) and start the driver again"
        )
    file_modes.own_dir(owners)


def _try_all(directory: Path, pod_uid: str | None, shared: bool) -> tuple[int, int, int] | bool:
    """The three locks (directory, mode file, owner record), or whether the mode (True) or the record (False) was busy."""
    dir_fd = _try_dir_lock(directory, shared)
    if dir_fd is None:
        return True
    mode_fd = _try_mode_lock(directory / MODE_LOCK, shared)
    if mode_fd is None:
        os.close(dir_fd)
        return True
    owner_fd = open_locked(directory / OWNERS_DIR / owner_name(pod_uid), blocking=False)
    if owner_fd is None:
        os.close(mode_fd)
        os.close(dir_fd)
        return False
    return dir_fd, mode_fd, owner_fd


def _try_dir_lock(directory: Path, shared: bool) -> int | None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    return flock_or_close(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)


def _same_file(path: Path, fd: int) -> bool:
    """Whether `path` (not followed) is still the file or directory open as `fd`."""
    try:
        found, held = os.lstat(path), os.fstat(fd)
    except OSError:
        return False
    return (found.st_dev, found.st_ino) == (held.st_dev, held.st_ino)


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
    if not found and (_is_held(directory) or _is_held(directory / MODE_LOCK)):
        found.append(Holder(pod_uid=None, known=False))
    return found


def live_record(directory: Path, pod_uid: str) -> bool:
    """Whether a live instance with `pod_uid` holds `directory` (its record is flocked), whatever the record says."""
    return _is_held(directory / OWNERS_DIR / owner_name(pod_uid))


def _try_mode_lock(path: Path, shared: bool) -> int | None:
    return flock_or_close(open_lock_file(path), (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)


def _is_held(path: Path) -> bool:
    """Whether any process holds a flock on `path` (a shared probe fails only against an exclusive holder, so an
    exclusive probe is used, given back at once). `path` may be the state directory itself."""
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
        flags = data.get("flags") if isinstance(data.get("flags"), dict) else {}
        return Holder(
            pod_uid=str(pod_uid) if pod_uid else None,
            pid=int(data["pid"]),
            host=str(data.get("host") or "") or None,
            since=str(data.get("since") or "") or None,
            flags={str(k): v for k, v in flags.items() if isinstance(v, str) and str(k).startswith("--")},
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return Holder(pod_uid=None, known=False)  # still being written, or damaged: alive, but unnamed


def _write_record(fd: int, pod_uid: str | None, directory: Path, flags: Mapping[str, str]) -> None:
    """Who holds the lock and the daemon's effective flags, for refusals, `holders()` and doctor. Only informative:
    on a full disk the lock holds without it (the instance is then named as one that left no readable record)."""
    since = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    who = {"pid": os.getpid(), "host": socket.gethostname(), "podUID": pod_uid, "since": since}
    kept = {flag: value for flag, value in flags.items() if len(value) <= _FLAG_LIMIT}
    record = json.dumps({**who, "flags": kept}).encode()
    if len(record) > _RECORD_LIMIT:  # never a record holders() cannot read back: who it is matters more than its flags
        record = json.dumps(who).encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
    except OSError as exc:
        log.error("cannot write this instance's record; the lock holds without it", extra=fields(state=str(directory), error=cause(exc)))


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
               "or run every instance with its own --pod-uid (the pod's UID, $DRA_DRIVER_POD_UID) for a rolling update")  # fmt: skip
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
