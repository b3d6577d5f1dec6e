"""Scratch directories of simulated backends (`--profile`): named per process, held, and reaped once dead.

A simulated backend builds its fake sysfs (and NVIDIA's driver root) in a directory under $TMPDIR
and removes it on close. A process killed with SIGKILL (or one that never closes) cannot, so each
directory is made findable and safe to reap by a later simulated backend:

- its name is ``dra-<vendor>-sim-<pid>-<random>``: ours, and whose;
- its owner holds an exclusive flock on ``<dir>/.owner`` for as long as the directory is in use.
  The kernel drops the lock when the process dies, however it dies, and the lock means the same in
  every PID namespace that shares the filesystem, so a PID that looks dead from here (or was reused)
  never decides alone.

`reap_stale` removes a directory only if all of these hold: the name matches the pattern exactly,
it is a real directory (not a symlink) owned by our user, its PID is not a live process here, and its
lock can be taken (or, for a directory whose owner died before creating the lock, it is older than
`LOCKLESS_GRACE_S`). Removal follows no symlinks (shutil.rmtree's fd-based walk). `close_all` is for a
process about to die of a signal. The demo's work dir is one of these too (`dra-demo-sim-*`, under /tmp
for short socket paths). Real-hardware backends never create or reap anything here.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import weakref
from pathlib import Path

from dra_driver.logs import fields

log = logging.getLogger(__name__)

LOCK_NAME = ".owner"
# mkdtemp's random part: 8 characters of [a-z0-9_]. Linux PIDs are at most 2**22 (7 digits).
_NAME = re.compile(r"dra-(?P<vendor>[a-z0-9]{1,16})-sim-(?P<pid>[1-9][0-9]{0,6})-[a-z0-9_]{8}")
_VENDOR = re.compile(r"[a-z0-9]{1,16}")
# A directory without a lock file is one whose creator died between mkdir and taking the lock (a few
# microseconds) or one being created right now; only the first is old.
LOCKLESS_GRACE_S = 60.0

_reaped_in: set[str] = set()  # temp dirs this process has swept already (one sweep per process each)
_reaped_lock = threading.Lock()
_live: dict[Path, weakref.ref[ScratchDir]] = {}  # this process's scratch dirs not yet removed
_abandoned: list[Path] = []
_used: set[Path] = set()  # the directories this process made scratch dirs in
_half_made: set[Path] = set()  # made and maybe locked by `create`, not yet a ScratchDir


class ScratchDir:
    """One simulated backend's scratch directory; `close` (or the context manager) removes it.

    One nobody closed is removed when garbage-collected or at interpreter exit (weakref.finalize),
    with a warning, and listed by `abandoned_dirs`: the caller has a missing close to fix. SIGKILL
    is left to `reap_stale`.
    """

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        _live[path] = weakref.ref(self)
        self._finalizer = weakref.finalize(self, _abandon, path, lock_fd, os.getpid())

    def close(self) -> None:
        detached = self._finalizer.detach()  # None once closed: close is idempotent
        if detached is not None:
            _remove(*detached[2])

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> ScratchDir:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def open_dirs() -> set[Path]:
    """Scratch directories of this process not yet removed."""
    return set(_live)


def close_all() -> None:
    """Remove every scratch directory of this process: for a process about to die of a signal, whose
    finally blocks will not run (dra_driver.cli.main).

    Also one `create` had made but not finished when the signal came (the handler runs between two
    bytecodes of the main thread, maybe right after mkdtemp): a dir of our name and PID not yet handed over.
    """
    for ref in list(_live.values()):
        scratch = ref()
        if scratch is not None:
            scratch.close()
    own = str(os.getpid())
    for directory in list(_used):
        for entry in _entries(directory):
            match = _NAME.fullmatch(entry.name)
            path = Path(entry.path)
            if match is None or match["pid"] != own or path in _live:
                continue
            if path in _half_made:
                shutil.rmtree(path, ignore_errors=True)
                continue
            try:
                _remove_unheld(path, lockless_grace_s=0.0)
            except OSError as exc:
                log.debug("scratch directory left in place", extra=fields(path=entry.path, error=str(exc)))


def abandoned_dirs() -> list[Path]:
    """Scratch directories this process removed only at garbage collection or exit (their owner was never closed)."""
    return list(_abandoned)


def create(vendor: str, directory: Path | None = None) -> ScratchDir:
    """A new scratch directory for `vendor`'s simulated backend (or the demo) under `directory` (default
    $TMPDIR), after sweeping the dead processes' ones there."""
    if not _VENDOR.fullmatch(vendor):
        raise ValueError(f"vendor {vendor!r}: scratch directory names take 1-16 characters of [a-z0-9]")
    directory = directory if directory is not None else Path(tempfile.gettempdir())
    _used.add(directory)
    _reap_once(directory)
    path = Path(tempfile.mkdtemp(prefix=f"dra-{vendor}-sim-{os.getpid()}-", dir=directory))
    try:  # BaseException: an interrupt (Ctrl-C) here must not strand the directory either
        fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        _half_made.add(path)  # locked below but not yet a ScratchDir: close_all must still know it is ours
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else can hold a lock on a file we just made
            return ScratchDir(path, fd)
        except BaseException:
            os.close(fd)
            raise
    except BaseException:
        _live.pop(path, None)
        shutil.rmtree(path, ignore_errors=True)
        raise
    finally:
        _half_made.discard(path)


def reap_stale(directory: Path) -> list[Path]:
    """Remove the scratch directories under `directory` whose owner is gone; return what was removed."""
    removed: list[Path] = []
    for entry in _entries(directory):
        match = _NAME.fullmatch(entry.name)
        if match is None or int(match["pid"]) == os.getpid():
            continue
        path = Path(entry.path)
        try:
            if _reap_if_dead(path, int(match["pid"])):
                removed.append(path)
        except OSError as exc:  # another process reaping the same directory, or one we may not touch
            log.debug("scratch directory left in place", extra=fields(path=str(path), error=str(exc)))
    if removed:
        log.info("removed scratch directories of dead simulated backends", extra=fields(directory=str(directory), count=len(removed)))
    return removed


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        return list(os.scandir(directory))
    except OSError as exc:
        log.debug("cannot list the temp directory", extra=fields(directory=str(directory), error=str(exc)))
        return []


def _reap_once(directory: Path) -> None:
    key = str(directory)
    with _reaped_lock:
        if key in _reaped_in:
            return
        _reaped_in.add(key)
    reap_stale(directory)


def _reap_if_dead(path: Path, pid: int) -> bool:
    return not _pid_alive(pid) and _remove_unheld(path, LOCKLESS_GRACE_S)


def _remove_unheld(path: Path, lockless_grace_s: float) -> bool:
    """Remove `path` if it is a real directory of our user whose lock nobody holds (or, lacking its lock file,
    older than `lockless_grace_s`); whether it was removed."""
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return False
    try:
        fd = os.open(path / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        if time.time() - info.st_mtime < lockless_grace_s:
            return False
        shutil.rmtree(path)
        return True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # held: its owner lives (in another PID namespace, or under a reused PID)
        shutil.rmtree(path)  # while holding the lock, so no second reaper races us through it
        return True
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError as exc:
        return exc.errno == errno.EPERM  # exists, owned by someone else
    return True


def _abandon(path: Path, lock_fd: int, owner_pid: int) -> None:
    if os.getpid() != owner_pid:
        return  # a forked child exiting: the directory is its parent's
    log.warning("simulated backend never closed: its scratch directory is removed at garbage collection or exit",
                extra=fields(path=str(path)))  # fmt: skip
    _abandoned.append(path)
    _remove(path, lock_fd, owner_pid)


def _remove(path: Path, lock_fd: int, owner_pid: int) -> None:
    if os.getpid() != owner_pid:
        return  # a forked child closing what it inherited: the directory is its parent's
    _live.pop(path, None)
    try:
        shutil.rmtree(path, ignore_errors=True)
    finally:
        os.close(lock_fd)
