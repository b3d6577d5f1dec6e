"""Scratch directories of simulated backends (`--profile`): named per process, held, and reaped once dead.

A simulated backend builds its fake sysfs (and NVIDIA's driver root) in a directory under $TMPDIR
and removes it on close. A process killed with SIGKILL (or one that never closes) cannot, so each
directory is made findable and safe to reap by a later simulated backend:

- its name is ``dra-<vendor>-sim-<pid>-<random>``: ours, and whose;
- its owner holds an exclusive flock on ``<dir>/.owner`` for as long as the directory is in use.
  The kernel drops the lock when the process dies, however it dies, and the lock means the same in
  every PID namespace that shares the filesystem, so a PID that looks dead from here (or was reused)
  never decides alone;
- it is made as ``.dra-...`` and takes its name only once its lock is held, so a directory under its name
  has a live holder or a dead one; only the hidden one of a process killed between mkdir and flock (a few
  microseconds) waits out `LOCKLESS_GRACE_S`.

`reap_stale` removes a directory only if all of these hold: the name matches the pattern exactly,
it is a real directory (not a symlink) owned by our user, its PID is not a live process here, and its
lock can be taken (or, for a directory whose owner died before creating the lock, it is older than
`LOCKLESS_GRACE_S`). Removal follows no symlinks (shutil.rmtree's fd-based walk). `close_all` is for a
process about to die of a signal: it removes every path this process registered, and a path is registered
before it exists and unregistered only once removed, so a signal between any two bytecodes finds it. The
demo's work dir is one of these too (`dra-demo-sim-*`, under /tmp for short socket paths). Real-hardware
backends never create or reap anything here.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import secrets
import shutil
import stat
import string
import tempfile
import threading
import time
import weakref
from pathlib import Path

from dra_driver.common.logs import fields

log = logging.getLogger(__name__)

LOCK_NAME = ".owner"
# The random part: 8 characters of [a-z0-9_]. Linux PIDs are at most 2**22 (7 digits). A leading dot: not locked yet.
_NAME = re.compile(r"\.?dra-(?P<vendor>[a-z0-9]{1,16})-sim-(?P<pid>[1-9][0-9]{0,6})-[a-z0-9_]{8}")
_RANDOM_CHARS = string.ascii_lowercase + string.digits + "_"
_NAME_TRIES = 100
_VENDOR = re.compile(r"[a-z0-9]{1,16}")
# A directory without a lock file is one whose creator died between mkdir and taking the lock (a few
# microseconds) or one being created right now; only the first is old.
LOCKLESS_GRACE_S = 60.0

_reaped_in: set[str] = set()  # temp dirs this process has swept already (one sweep per process each)
_reaped_lock = threading.Lock()
_live: dict[Path, weakref.ref[ScratchDir]] = {}  # this process's scratch dirs not yet removed
_abandoned: list[Path] = []
# Every path this process has made or is about to make, from before it exists until it is removed: what close_all
# removes. Never a name of another process (nor of the parent, in a forked child).
_mine: set[Path] = set()
os.register_at_fork(after_in_child=_mine.clear)


class ScratchDir:
    """One simulated backend's scratch directory; `close` (or the context manager) removes it.

    One nobody closed is removed when garbage-collected or at interpreter exit (weakref.finalize),
    with a warning, and listed by `abandoned_dirs`: the caller has a missing close to fix. SIGKILL
    is left to `reap_stale`.
    """

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        self._finalizer = weakref.finalize(self, _abandon, path, lock_fd, os.getpid())
        _live[path] = weakref.ref(self)  # last: close_all may close any ScratchDir it finds here

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

    Also one `create` has not finished or `close` has not finished removing when the signal came (the
    handler runs between two bytecodes of the main thread): its lock is still held by this very process.
    """
    for ref in list(_live.values()):
        scratch = ref()
        if scratch is not None:
            scratch.close()
    for path in list(_mine):
        shutil.rmtree(path, ignore_errors=True)


def abandoned_dirs() -> list[Path]:
    """Scratch directories this process removed only at garbage collection or exit (their owner was never closed)."""
    return list(_abandoned)


def create(vendor: str, directory: Path | None = None) -> ScratchDir:
    """A new scratch directory for `vendor`'s simulated backend (or the demo) under `directory` (default
    $TMPDIR), after sweeping the dead processes' ones there."""
    if not _VENDOR.fullmatch(vendor):
        raise ValueError(f"vendor {vendor!r}: scratch directory names take 1-16 characters of [a-z0-9]")
    directory = directory if directory is not None else Path(tempfile.gettempdir())
    _reap_once(directory)
    hidden, path = _make_hidden(vendor, directory)
    try:  # BaseException: an interrupt (Ctrl-C) here must not strand the directory either
        fd = os.open(hidden / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else can hold a lock on a file we just made
            os.rename(hidden, path)  # its name only now: a visible scratch dir is held, or its owner is dead
            return ScratchDir(path, fd)
        except BaseException:
            os.close(fd)
            raise
    except BaseException:
        _live.pop(path, None)
        # Under its hidden name until the rename succeeded; `path` is ours only after it (else it may be another's).
        shutil.rmtree(hidden if os.path.lexists(hidden) else path, ignore_errors=True)
        _mine.discard(path)
        raise
    finally:
        _mine.discard(hidden)


def _make_hidden(vendor: str, directory: Path) -> tuple[Path, Path]:
    """A new directory `.dra-<vendor>-sim-<pid>-<random>` under `directory`, and the name it takes once locked;
    both registered for close_all before either exists."""
    for _ in range(_NAME_TRIES):
        name = f"dra-{vendor}-sim-{os.getpid()}-{''.join(secrets.choice(_RANDOM_CHARS) for _ in range(8))}"
        hidden, path = directory / f".{name}", directory / name
        _mine.update((hidden, path))
        try:
            os.mkdir(hidden, 0o700)
        except OSError as exc:  # not made: the name is another's, or nothing is there
            _mine.difference_update((hidden, path))
            if isinstance(exc, FileExistsError):
                continue
            raise
        return hidden, path
    raise FileExistsError(errno.EEXIST, f"no free scratch directory name under {directory} after {_NAME_TRIES} tries")


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
    return not _pid_alive(pid) and _remove_unheld(path)


def _remove_unheld(path: Path) -> bool:
    """Remove `path` if it is a real directory of our user whose lock nobody holds (or, lacking its lock file,
    older than `LOCKLESS_GRACE_S`); whether it was removed."""
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return False
    try:
        fd = os.open(path / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        if time.time() - info.st_mtime < LOCKLESS_GRACE_S:
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
    _live.pop(path, None)  # still in _mine until removed: a signal during the rmtree finishes it (close_all)
    try:
        shutil.rmtree(path, ignore_errors=True)
        _mine.discard(path)
    finally:
        os.close(lock_fd)
