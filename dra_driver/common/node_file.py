"""The one way the node side reads a state file or a file another party writes (the kubelet's, a lock record).

Such a path may hold anything: a named pipe (an `open` for reading blocks until a writer comes), a symlink to
`/dev/zero` (a read never ends), a directory, a device, a file of gigabytes. So a read here opens without
blocking and, by default, without following a symlink, refuses whatever `fstat` says is not a regular file,
and reads at most `max_bytes`. Every refusal is a `NodeFileError` (an OSError, so a reader's existing
`except OSError` treats it as an unreadable file) naming the path, what is there, and the fix. A missing file
stays a FileNotFoundError.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


# A claim UID that may name a file as it is (a Kubernetes UID always does); anything else goes by its hash.
PLAIN_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,199}")
HASHED_PREFIX = "sha256-"


def claim_file_stem(claim_uid: str) -> str:
    """The file (or directory) name of a claim's per-claim file, without suffix: the UID when it is a plain name, its
    SHA-256 otherwise, so no path is ever built from a UID as the socket or the API server sent it."""
    if PLAIN_FILE_NAME.fullmatch(claim_uid):
        return claim_uid
    return HASHED_PREFIX + hashlib.sha256(claim_uid.encode()).hexdigest()


def child_path(directory: Path | str, name: str) -> str:
    """`directory/name` as a str: the path of a per-claim file (CDI spec, claim file, lock, checkpoint and vendor records).

    Not `directory / name`: Python 3.11's pathlib interns every component it parses, so each claim's file names
    would enter CPython's table of interned strings, which then grows by a step over the first thousand claims
    (docs/performance.md, "Memory over cycles"). `name` is one component, already validated by the caller (a
    UID checked or hashed); a separator, "." or ".." in it is refused here too, so it can never steer the path."""
    if not name or "/" in name or "\0" in name or name in (".", ".."):
        raise ValueError(f"{name!r} is not a file name: no path is built from it")
    head = os.fspath(directory)
    return f"{head}{name}" if head.endswith("/") else f"{head}/{name}"


class NodeFileError(OSError):
    """A node file that is not read: not a regular file, a symlink where none is followed, or too large."""

    def __init__(self, path: Path | str, problem: str, fix: str) -> None:
        self.path = str(path)
        self.problem = problem
        self.fix = fix
        super().__init__(errno.EINVAL, f"{self.path}: {problem}; {fix}")

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}; {self.fix}"


def open_regular(path: Path | str, flags: int = os.O_RDONLY, *, follow_symlinks: bool = False, dir_fd: int | None = None) -> int:
    """A descriptor of the regular file at `path`, opened without blocking (`flags` plus O_NONBLOCK, which a
    regular file ignores). Raises NodeFileError for anything else, the descriptor closed."""
    full = flags | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, full, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise NodeFileError(path, "is a symlink, which is never followed here", "remove it; the driver writes this file itself") from exc
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise NodeFileError(path, f"is {kind}, not a regular file", "remove it; only a regular file is read here")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int, path: Path | str, max_bytes: int) -> bytes:
    """At most `max_bytes` from the start of an open regular file; NodeFileError when it holds more."""
    chunks: list[bytes] = []
    size = 0
    while size <= max_bytes:
        chunk = os.pread(fd, max_bytes + 1 - size, size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > max_bytes:
        raise NodeFileError(path, f"is larger than {max_bytes} bytes, more than such a file ever holds", "not read; remove it or find what wrote it")
    return b"".join(chunks)


def read_regular(path: Path | str, max_bytes: int, *, follow_symlinks: bool = False) -> bytes:
    """The bytes of the regular file at `path` (see the module docstring): never blocks, never reads more than
    `max_bytes`, never follows a symlink unless `follow_symlinks` (only where no other party can write the
    directory and a link there is deliberate)."""
    fd = open_regular(path, follow_symlinks=follow_symlinks)
    try:
        return read_fd(fd, path, max_bytes)
    finally:
        os.close(fd)
