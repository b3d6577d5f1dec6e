"""Replace a file atomically: readers see the old or the new content, never a mix."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from dra_driver.common import node_file
from dra_driver.common import file_modes

TEMP_SUFFIX = ".tmp"


def replace_file(path: Path | str, data: bytes, *, durable: bool, mode: int | None = None) -> None:
    """Write `data` to a temp file in the same directory, optionally flush it, rename it over `path`.

    The temp name is random: two plugin instances in a rolling update both
    run as PID 1 in their pods, so a pid-based name would be shared. It is
    `.<name>.<random>.tmp`: a leading dot and no .json/.yaml ending, so neither CDI
    runtimes (*.json/*.yaml only) nor our loaders pick it up, and the target's name
    inside it lets start-up tell whose leftover (kill -9 mid-write) it is.
    The parent directory is created (0755, whatever the umask) when missing.
    """
    target = os.fspath(path)
    try:
        fd, tmp = create_temp(target)
    except FileNotFoundError:
        file_modes.make_dirs(Path(os.path.dirname(target) or "."), file_modes.CDI_DIR)
        fd, tmp = create_temp(target)
    try:
        if mode is not None and mode != _TEMP_MODE:
            os.fchmod(fd, mode)  # exactly `mode`, whatever the umask
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            datasync(fd)
        os.replace(tmp, path)  # before the close: the temp's flock keeps remove_leftovers off it until renamed
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    finally:
        os.close(fd)


_TEMP_MODE = 0o600
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)


def create_temp(target: str) -> tuple[int, str]:
    """A new temp file beside `target` named `.<name>.<random>.tmp` (O_EXCL: never an existing file or link).

    What tempfile.mkstemp does, without its per-call name-sequence and path handling (this runs several
    times per prepared claim); 12 random hex digits make a name collision a retry, not a failure.
    """
    head, _, name = target.rpartition("/")
    directory = f"{head}/" if head or target.startswith("/") else ""
    for _ in range(100):
        tmp = f"{directory}.{name}.{os.urandom(6).hex()}{TEMP_SUFFIX}"
        try:
            fd = os.open(tmp, _TEMP_FLAGS, _TEMP_MODE)
        except FileExistsError:
            continue
        # Locked while in use (the kernel drops the lock when a kill -9 ends the writer): remove_leftovers takes
        # only unlocked temps. Still at its name once locked, or removed as a leftover in between: a new one then.
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _same_file(tmp, fd):
            return fd, tmp
        os.close(fd)
    raise FileExistsError(errno.EEXIST, "no unused temp file name", f"{directory}.{name}.*{TEMP_SUFFIX}")


def _same_file(path: str, fd: int) -> bool:
    try:
        return os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def is_temp_name(name: str) -> bool:
    """Whether `name` is a temp file name of create_temp (`.<name>.<random>.tmp`)."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def remove_leftovers(directory: Path, depth: int = 3) -> list[Path]:
    """Remove the temp files of atomic writes a kill -9 interrupted in `directory` and its subdirectories (to
    `depth` levels, never through a symlink); the removed paths. A temp a live writer still holds (its flock,
    see create_temp) is left alone, so this is safe while another instance writes in the same directory."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:  # missing, not a directory, unreadable: nothing to remove here
        return removed
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            if depth > 0:
                removed += remove_leftovers(Path(entry.path), depth - 1)
        elif is_temp_name(entry.name) and _remove_unlocked(entry.path):
            removed.append(Path(entry.path))
    return removed


def _remove_unlocked(path: str) -> bool:
    try:
        fd = node_file.open_regular(path)
    except OSError:  # gone meanwhile, or not a regular file: not a temp of ours
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not _same_file(path, fd):  # renamed into place (or replaced) since the listing
            return False
        os.unlink(path)
        return True
    except OSError:  # locked: a live writer's
        return False
    finally:
        os.close(fd)


def datasync(fd: int) -> None:
    # fdatasync flushes the data and the metadata needed to read it back (size), skipping timestamps.
    sync = getattr(os, "fdatasync", os.fsync)
    sync(fd)
