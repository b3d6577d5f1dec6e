"""Disk failures of a claim operation as that claim's error: which directory, what the system said, the fix.

A full or read-only CDI or state directory is the node's problem, not a bug: the kubelet (and whoever reads the
pod's events) gets `... CDI directory /var/run/cdi: Read-only file system (EROFS); remount it read-write or point
--cdi-dir at a writable directory` instead of an internal error with a temp file's name.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dra_driver.node.plugin.claim_checks import ClaimError


@dataclass(frozen=True)
class Place:
    what: str  # "CDI directory"
    path: Path
    flag: str  # the command-line flag that chooses it


class StorageError(ClaimError):
    """A claim's file operation failed in one of the driver's directories."""

    def __init__(self, message: str, errno_value: int | None) -> None:
        super().__init__(message)
        self.errno = errno_value


_FIXES = {
    errno.ENOSPC: "free space (or inodes) on that filesystem",
    errno.EDQUOT: "raise the quota or free space on that filesystem",
    errno.EROFS: "remount it read-write or point {flag} at a writable directory",
    errno.EACCES: "the driver needs write access: check the directory's owner and mode, or point {flag} elsewhere",
    errno.EPERM: "the driver needs write access: check the directory's owner, mode and attributes, or point {flag} elsewhere",
}


def cause(exc: OSError) -> str:
    """`Read-only file system (EROFS)`: the system's words and the errno's name."""
    name = errno.errorcode.get(exc.errno, "") if exc.errno is not None else ""
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text


@contextmanager
def in_place(place: Place, action: str) -> Iterator[None]:
    """Turn an OSError of the block into a StorageError: `<action>: <what> <dir>: <cause>; <fix>`."""
    try:
        yield
    except OSError as exc:
        fix = _FIXES.get(exc.errno or 0, "check that filesystem")
        raise StorageError(f"{action}: {place.what} {place.path}: {cause(exc)}; {fix.format(flag=place.flag)}", exc.errno) from exc
