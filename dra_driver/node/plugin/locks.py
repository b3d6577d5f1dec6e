"""Locks for prepare/unprepare: per claim UID in-process, and file locks across instances."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dra_driver.common import file_modes
from dra_driver.common.node_file import child_path
from dra_driver.common.logs import fields
from dra_driver.model.names import file_stem

log = logging.getLogger(__name__)


class KeyedLocks:
    """One mutex per key, created on demand and dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive flock on `path`; excludes other processes and other threads of this one."""
    file_modes.make_dirs(path.parent, file_modes.PRIVATE_DIR)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def open_lock_file(path: Path | str) -> int:
    """Open (creating) a lock file, never following a link and never blocking. Anything but a regular file in
    its place (damage: a directory, a symlink, a FIFO, a device) is moved aside, logged, and replaced by a fresh
    file: a lock file holds no state, a lock that cannot open stops the driver, and a planted link must never
    make the driver write (a lock holder writes its record into the file) into whatever it points at."""
    for _ in range(3):
        try:
            fd = os.open(path, _LOCK_FLAGS, 0o600)
        except OSError as exc:
            if not isinstance(exc, IsADirectoryError) and exc.errno != errno.ELOOP:  # ELOOP: O_NOFOLLOW met a link
                raise
            _move_aside(path, "a directory" if isinstance(exc, IsADirectoryError) else "a symbolic link")
            continue
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind == stat.S_IFREG:
            return fd
        os.close(fd)
        _move_aside(path, f"a special file (type {kind:o})")
    raise OSError(errno.EAGAIN, "a non-regular file keeps reappearing where a lock file should be", os.fspath(path))


_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK


def _move_aside(path: Path | str, what: str) -> None:
    aside = f"{os.fspath(path)}.corrupt-{time.time_ns()}"
    try:
        os.replace(path, aside)  # renames a link itself, never its target
    except FileNotFoundError:
        return
    log.error("something else stood where a lock file should be; moved aside", extra=fields(path=str(path), found=what, moved_to=str(aside)))


def flock_or_close(fd: int, operation: int) -> int | None:
    """`fd` once `flock(fd, operation)` holds; None (fd closed) when LOCK_NB found it taken; fd closed on any error."""
    try:
        fcntl.flock(fd, operation)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_locked(path: Path | str, blocking: bool) -> int | None:
    """Open and flock `path`; retry if the file was unlinked (released for good) while we waited.

    A holder may unlink its lock file on release (see ClaimFileLocks.release), so
    after the flock succeeds the fd must still be the file at `path`; otherwise
    a later opener would lock a fresh file and two holders would coexist.
    """
    while True:
        try:
            fd = open_lock_file(path)
        except FileNotFoundError:  # the first lock in a new directory (not checked up front: this runs per claim)
            file_modes.make_dirs(Path(os.path.dirname(path)), file_modes.PRIVATE_DIR)
            fd = open_lock_file(path)
        if flock_or_close(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB)) is None:
            return None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


class ClaimFileLocks:
    """One lock file per claim UID in a directory shared by all instances on the node.

    Held for the whole prepare/unprepare of that claim, so instances (and threads)
    working on different claims never wait for each other; `try_hold` lets a
    starting instance tell a claim another live instance is working on (held)
    from one whose preparer died (free).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, uid: str) -> str:
        # Recovery locks UIDs read back from file names; an odd one is hashed, never joined as a path. A str, not a
        # Path: a Path would intern the name (node_file.child_path).
        return child_path(self.directory, f"{file_stem(uid)}.lock")

    @contextmanager
    def hold(self, uid: str, drop_when: Callable[[], bool] = lambda: False) -> Iterator[None]:
        """Block until the claim's lock is ours; unlink the file on release if `drop_when()` (claim gone)."""
        fd = open_locked(self.path(uid), blocking=True)
        assert fd is not None
        try:
            yield
        finally:
            self._release(uid, fd, drop_when)

    @contextmanager
    def try_hold(self, uid: str) -> Iterator[bool]:
        """Yield True holding the lock, or False at once when another holder has it."""
        fd = open_locked(self.path(uid), blocking=False)
        if fd is None:
            yield False
            return
        try:
            yield True
        finally:
            self._release(uid, fd, lambda: False)

    def _release(self, uid: str, fd: int, drop_when: Callable[[], bool]) -> None:
        try:
            if drop_when():
                try:
                    os.unlink(self.path(uid))  # while still locked: waiters notice and retry
                except FileNotFoundError:
                    pass
        finally:
            os.close(fd)


class SharedSection:
    """The lock all driver instances on the node take around checkpoint reads and writes.

    One flock on `path` (kept open: no open/close per section) plus a thread lock,
    because threads sharing one open file would not exclude each other with flock.

    The lock file also carries a change stamp so that an instance re-reads the
    checkpoint only when another instance may have changed it: every section
    writes a new stamp (this instance's id and a counter) into the file before
    the caller does anything, so a stamp other than the one this instance wrote
    last means someone else held the section since. Writing it first keeps that
    true even if the holder dies half-way through. `reload` runs, lock held,
    whenever the stamp is not ours (and always on the first entry).
    """

    _STAMP_SIZE = 32

    def __init__(self, path: Path, reload: Callable[[], None]) -> None:
        self.path = path
        self._reload = reload
        self._thread_lock = threading.Lock()
        self._fd: int | None = None
        self._instance = os.urandom(8).hex()
        self._count = 0
        self._last_stamp = b""
        self.reloads = 0  # how often another instance's stamp (or the first entry) forced a re-read

    @contextmanager
    def hold(self) -> Iterator[None]:
        with self._thread_lock:
            fd = self._locked_fd()
            try:
                seen = os.pread(fd, self._STAMP_SIZE, 0)
                self._write_stamp(fd)
                if seen != self._last_stamp or not seen:
                    self.reloads += 1
                    self._reload()
                self._last_stamp = self._current_stamp()
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        with self._thread_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _locked_fd(self) -> int:
        """The open lock file, flocked; reopened if the file at `path` was replaced or removed."""
        if self._fd is None:
            self._fd = self._open()
        while True:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                same = os.stat(self.path).st_ino == os.fstat(self._fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return self._fd
            os.close(self._fd)  # somebody deleted it: lock what the others will open
            self._fd = self._open()

    def _open(self) -> int:
        file_modes.make_dirs(self.path.parent, file_modes.PRIVATE_DIR)
        return open_lock_file(self.path)

    def _current_stamp(self) -> bytes:
        return f"{self._instance}:{self._count:015d}".encode()

    def _write_stamp(self, fd: int) -> None:
        self._count += 1
        os.pwrite(fd, self._current_stamp(), 0)
