"""World-writable files and directories among those the driver serves from: anyone on the node could
then plant CDI specs the runtime applies as root, or call the driver's sockets."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

_MAX_DEPTH = 2  # <state dir>/<driver>/checkpoint.d, <kubelet dir>/plugins/<driver>/dra.sock


def world_writable(roots: Iterable[Path], depth: int = _MAX_DEPTH) -> list[tuple[Path, int]]:
    """(path, mode) of each world-writable entry at or below the roots (symlinks are not followed;
    a sticky directory such as /tmp is fine: others cannot replace what is in it)."""
    found = []
    for path in _walk(roots, depth):
        try:
            mode = path.lstat().st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode) or not mode & stat.S_IWOTH:
            continue
        if stat.S_ISDIR(mode) and mode & stat.S_ISVTX:
            continue
        found.append((path, stat.S_IMODE(mode)))
    return found


def _walk(roots: Iterable[Path], depth: int) -> Iterator[Path]:
    for root in roots:
        if not os.path.lexists(root):
            continue
        yield root
        if depth > 0 and root.is_dir() and not root.is_symlink():
            try:
                children = sorted(root.iterdir())
            except OSError:
                continue
            yield from _walk(children, depth - 1)
