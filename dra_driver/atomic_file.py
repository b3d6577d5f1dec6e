"""Replace a file atomically: readers see the old or the new content, never a mix."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def replace_file(path: Path, data: bytes, *, durable: bool, mode: int | None = None, temp_prefix: str | None = None) -> None:
    """Write `data` to a temp file in the same directory, optionally flush it, rename it over `path`.

    The temp name is random (mkstemp): two plugin instances in a rolling update both
    run as PID 1 in their pods, so a pid-based name would be shared. It starts with a
    dot and ends in `.tmp`, so neither CDI runtimes (*.json/*.yaml) nor our loaders
    pick it up. The parent directory is created (0755) when missing.
    """
    prefix = temp_prefix or f".{path.name}."
    try:
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    except FileNotFoundError:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
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
