"""Replace a file atomically: readers see the old or the new content, never a mix."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from dra_driver.node import file_modes

TEMP_SUFFIX = ".tmp"


def replace_file(path: Path, data: bytes, *, durable: bool, mode: int | None = None) -> None:
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
        file_modes.make_dirs(path.parent, file_modes.CDI_DIR)
        fd, tmp = create_temp(target)
    try:
        try:
            if mode is not None and mode != _TEMP_MODE:
                os.fchmod(fd, mode)  # exactly `mode`, whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                datasync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


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
            return os.open(tmp, _TEMP_FLAGS, _TEMP_MODE), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temp file name", f"{directory}.{name}.*{TEMP_SUFFIX}")


def datasync(fd: int) -> None:
    # fdatasync flushes the data and the metadata needed to read it back (size), skipping timestamps.
    sync = getattr(os, "fdatasync", os.fsync)
    sync(fd)
