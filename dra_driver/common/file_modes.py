"""The modes of everything the driver creates, set explicitly so that no umask can widen them.

| What | Mode | Why |
|---|---|---|
| state dir when the driver creates it, and everything under it (`<driver>/`, checkpoint.d, claims/, instances/) | 0700 | only the driver reads or writes its records and locks |
| kubelet plugin dirs (`plugins/<driver>`, `plugins_registry` when the driver creates it) | 0750 | the kubelet (root) dials the sockets in them |
| CDI dir when the driver creates it | 0755 | container runtimes read the specs |
| sockets | 0600 | connecting needs write permission on the socket file: the kubelet (root) only |
| CDI specs | 0644 | runtimes read them, only the driver writes them |
| claim files, checkpoint records, lock files, `registrations/` markers, sharing and simulated-hardware records | 0600 | the driver's own |
| readiness status dir `<state-dir>/ready` and its files | 0755 / 0644 | the exec probe (`dra-driver ready`) reads them, only the driver writes |
| MPS directories (`<state-dir>/nvidia/mps`, each claim's directory and its `pipe`, `log`, `shm`) | 0755 | clients in containers (any user) use the pipe directory; only the driver and its MPS daemon write |
| what an MPS control daemon creates (control socket, pid file, logs) | umask 022 for the daemon | it is started with this umask, not the driver's |

A mode is applied with chmod after the file or directory exists: `mkdir` and `open` only ever clear bits with
the umask, never set them, so the result would otherwise depend on it. Directories whose names the driver
chooses (`<state-dir>/<driver>` and below, `plugins/<driver>`) are corrected when found wider, and refused when
another user owns them (that user could rewrite the records); directories named by a flag or owned by the
kubelet (`--state-dir`, `--cdi-dir`, `plugins_registry`) that the driver's own user owns lose group and other
write permission, with a warning (a sticky one such as /tmp only gets the warning); the driver never changes
one owned by someone else, and `check` reports it.
"""  # noqa: E501 - the table's rows cannot wrap

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from dra_driver.common.errors import DraError
from dra_driver.common.logs import fields

log = logging.getLogger(__name__)

PRIVATE_DIR = 0o700
PLUGIN_DIR = 0o750
CDI_DIR = 0o755
SOCKET = 0o600
SPEC_FILE = 0o644
PRIVATE_FILE = 0o600
STATUS_DIR = 0o755
STATUS_FILE = 0o644
MPS_DIR = 0o755
MPS_DAEMON_UMASK = 0o022
_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


class PermissionProblem(DraError):
    """A directory the driver must own whose owner or mode lets someone else change the driver's state."""


def make_dirs(path: Path, mode: int) -> None:
    """Create `path` and its missing parents, each with exactly `mode`; existing directories are left as they are."""
    try:
        os.mkdir(path, mode)
    except FileNotFoundError:
        make_dirs(path.parent, mode)
        make_dirs(path, mode)
        return
    except FileExistsError:
        if not path.is_dir():
            raise
        return
    os.chmod(path, mode)  # exactly `mode`, whatever the umask


def own_dir(path: Path, mode: int = PRIVATE_DIR) -> None:
    """A directory only the driver writes: created with `mode`, an existing one narrowed to it, and refused when
    another user owns it."""
    make_dirs(path, mode)
    info = os.stat(path)
    if info.st_uid != os.geteuid():
        raise PermissionProblem(
            f"{path} is owned by uid {info.st_uid}, not by the driver's uid {os.geteuid()}: that user could change the driver's "
            f"state; remove it (or chown it to uid {os.geteuid()}) and start again"
        )
    if stat.S_IMODE(info.st_mode) != mode:
        log.warning("directory mode corrected", extra=fields(path=str(path), found=oct(stat.S_IMODE(info.st_mode)), mode=oct(mode)))
        os.chmod(path, mode)


def shared_dir(path: Path, mode: int) -> None:
    """A directory named by a flag or owned by the kubelet (`--state-dir`, `--cdi-dir`, the registry): created with
    `mode`; an existing one that our user owns loses group/other write permission (anyone who can write there
    could plant a CDI spec the runtime applies as root, or a registration socket). A sticky world-writable one is
    a shared temporary directory by design (/tmp): only a warning, never a change."""
    make_dirs(path, mode)
    info = os.stat(path)
    current = stat.S_IMODE(info.st_mode)
    if not current & _WRITABLE_BY_OTHERS:
        return
    if current & stat.S_ISVTX:
        log.warning(
            "directory is a shared temporary directory; give the driver a directory of its own", extra=fields(path=str(path), mode=oct(current))
        )
    elif info.st_uid == os.geteuid():
        log.warning("directory was writable by group or others; that permission is removed",
                    extra=fields(path=str(path), found=oct(current), mode=oct(current & ~_WRITABLE_BY_OTHERS)))  # fmt: skip
        os.chmod(path, current & ~_WRITABLE_BY_OTHERS)
    else:
        log.warning(
            "directory is writable by group or others and not ours to change", extra=fields(path=str(path), mode=oct(current), owner=info.st_uid)
        )


@dataclass(frozen=True)
class Expectation:
    """What one path the driver creates should look like (for `check`, e.g. a node health command)."""

    path: Path
    mode: int
    what: str  # e.g. "DRA socket", "state dir"
    exact: bool = True  # False: only "not writable by group or others" (shared directories)


def check(expectation: Expectation) -> str | None:
    """None when the path is as expected (or does not exist yet), else one line saying what is wrong and the fix."""
    try:
        info = os.lstat(expectation.path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{expectation.what} {expectation.path}: cannot be checked ({exc.strerror or exc})"
    mode = stat.S_IMODE(info.st_mode)
    if expectation.exact and info.st_uid != os.geteuid():
        return (
            f"{expectation.what} {expectation.path}: owned by uid {info.st_uid}, expected the driver's uid {os.geteuid()}; "
            "remove it and restart the driver"
        )
    if expectation.exact and mode != expectation.mode:
        return (
            f"{expectation.what} {expectation.path}: mode {mode:04o}, expected {expectation.mode:04o}; "
            f"chmod {expectation.mode:04o} {expectation.path}"
        )
    if not expectation.exact and mode & _WRITABLE_BY_OTHERS:
        return f"{expectation.what} {expectation.path}: mode {mode:04o} lets group or others write; chmod go-w {expectation.path}"
    return None
