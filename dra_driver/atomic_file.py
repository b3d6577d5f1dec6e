"""Replace a file atomically: readers see the old or the new content, never a mix."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def temp_prefix(path: Path) -> str:
    """The default temp-name prefix for `path`: a dot, its name, a dot (the random part and TEMP_SUFFIX follow)."""
    return f".{path.name}."


def replace_file(path: Path, data: bytes, *, durable: bool, mode: int | None = None) -> None:
    """Write `data` to a temp file in the same directory, optionally flush it, rename it over `path`.

    The temp name is random (mkstemp): two plugin instances in a rolling update both
    run as PID 1 in their pods, so a pid-based name would be shared. It is
    `.<name>.<random>.tmp`: a leading dot and no .json/.yaml ending, so neither CDI
    runtimes (*.json/*.yaml only) nor our loaders pick it up, and the target's name
    inside it lets start-up tell whose leftover (kill -9 mid-write) it is.
    The parent directory is created (0755) when missing.
    """
    prefix = temp_prefix(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=TEMP_SUFFIX, dir=path.parent)
    except FileNotFoundError:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)  # mkstemp creates 0600
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


def datasync(fd: int) -> None:
    # fdatasync flushes the data and the metadata needed to read it back (size), skipping timestamps.
    sync = getattr(os, "fdatasync", os.fsync)
    sync(fd)
