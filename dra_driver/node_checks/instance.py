"""Is a driver daemon running on this state directory? Read from its exclusive instance lock.

The daemon holds an exclusive `flock` on `<state dir>/instance.lock` while it runs; this only tries the
lock, non-blocking, on a read-only descriptor, and never creates the file. Kept to this one place so the
lock's name and location are changed here only.
"""

from __future__ import annotations

import fcntl
import os
from enum import Enum
from pathlib import Path

INSTANCE_LOCK_NAME = "instance.lock"


class LockState(str, Enum):
    HELD = "held"  # a running daemon holds it
    FREE = "free"  # the file exists, nobody holds it: no daemon runs on this state dir
    ABSENT = "absent"  # no daemon has ever run on this state dir (since the last reboot: it is a tmpfs)
    UNREADABLE = "unreadable"


def instance_lock_path(state_dir: Path) -> Path:
    return state_dir / INSTANCE_LOCK_NAME


def instance_lock_state(state_dir: Path) -> LockState:
    path = instance_lock_path(state_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return LockState.ABSENT
    except OSError:
        return LockState.UNREADABLE
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return LockState.HELD
    except OSError:
        return LockState.UNREADABLE
    finally:
        os.close(fd)  # closing drops a lock taken here at once
    return LockState.FREE
