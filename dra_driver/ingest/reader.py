"""Reading a file or standard input with a size limit enforced while reading.

Nothing here trusts the path: directories, missing or unreadable files and
special files are refused with a one-line InputError. A named pipe is opened
without blocking and waited on for at most FIFO_WAIT_SECONDS, so a pipe nobody
ever writes to is refused instead of hanging the command.
"""

from __future__ import annotations

import errno
import os
import select
import stat
import sys
from pathlib import Path
from typing import BinaryIO

from dra_driver.ingest.errors import InputError
from dra_driver.ingest.limits import Limits, active, flag_size, human_size

STDIN = "-"
_CHUNK = 1024 * 1024
FIFO_WAIT_SECONDS = 10.0


def display_name(source: str | Path) -> str:
    return "standard input" if str(source) == STDIN else str(source)


def _too_big(name: str, limits: Limits) -> InputError:
    return InputError.at(
        name,
        f"is larger than the input limit of {human_size(limits.max_bytes)}, reading stopped there"
        + limits.refusal("--max-input-size", flag_size(limits.max_bytes * 4)),
    )


def _read_limited(handle: BinaryIO, name: str, limits: Limits) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = handle.read(min(_CHUNK, limits.max_bytes + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limits.max_bytes:
            raise _too_big(name, limits)


def _stdin_bytes(limits: Limits) -> bytes:
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        return _read_limited(buffer, display_name(STDIN), limits)
    # A text stream without a byte buffer (tests replace sys.stdin with StringIO).
    text = sys.stdin.read(limits.max_bytes + 1)
    data = text.encode("utf-8", "surrogateescape")
    if len(data) > limits.max_bytes:
        raise _too_big(display_name(STDIN), limits)
    return data


def _open_error(name: str, exc: OSError) -> InputError:
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOENT:
        return InputError.at(name, "does not exist; check the path")
    if exc.errno == errno.EACCES:
        return InputError.at(name, f"cannot be read ({reason}); check its permissions")
    if exc.errno == errno.EISDIR:
        return InputError.at(name, "is a directory; give a file")
    return InputError.at(name, f"cannot be read: {reason}")


def _writer_came(fd: int) -> bool:
    """Whether a writer opened the pipe (data or its end arrived) within FIFO_WAIT_SECONDS."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    return bool(poller.poll(int(FIFO_WAIT_SECONDS * 1000)))


def read_bytes(source: str | Path, limits: Limits | None = None) -> bytes:
    """The bytes of `source` (a path, or '-' for standard input), at most limits.max_bytes."""
    limits = limits or active()
    name = display_name(source)
    if str(source) == STDIN:
        return _stdin_bytes(limits)
    try:
        info = os.stat(source)
    except OSError as exc:
        raise _open_error(name, exc) from exc
    if stat.S_ISDIR(info.st_mode):
        raise InputError.at(name, "is a directory; give a file")
    if stat.S_ISREG(info.st_mode) and info.st_size > limits.max_bytes:
        raise _too_big(name, limits)
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISFIFO(info.st_mode) or stat.S_ISCHR(info.st_mode)):
        raise InputError.at(name, "is not a regular file, pipe or character device")
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _open_error(name, exc) from exc
    if stat.S_ISFIFO(info.st_mode) and not _writer_came(fd):
        os.close(fd)
        raise InputError.at(name, f"is a named pipe nobody wrote to within {FIFO_WAIT_SECONDS:g} s; start the writer first")
    os.set_blocking(fd, True)  # from here reads wait for the writer's data, up to its end
    try:
        with os.fdopen(fd, "rb", buffering=0) as handle:
            return _read_limited(handle, name, limits)
    except OSError as exc:
        raise _open_error(name, exc) from exc
