"""The state simulated hardware keeps across daemon restarts: one locked, atomically replaced file per vendor and node.

Real GPUs keep their MIG mode, GPU/compute instances and partition modes when the driver process dies;
a simulated library that forgot them would let a restarted daemon recover against hardware that no
longer shows what the killed one left. So a simulated library (`--profile`) with a state directory
keeps what the driver can change in `<state_dir>/simulated-hardware/<vendor>.json`:

- the state directory is the node's (`--state-dir`, a tmpfs on a node): a restarted daemon of the same
  node finds it in the same place. It is not a scratch directory (dra_driver.simulation.scratch), so reaping a
  dead process's scratch directories never takes it; it lives as long as the node's other runtime state;
- every change is made under an exclusive flock on `<vendor>.lock`, so two processes (a rolling update) change
  it one at a time, and each reads the file again when the other has changed it since. The file is a sequence
  of lines: a whole state document, then changes to it, each `{"patch": {...}}` holding only the parts of the
  hardware that changed (a GPU's entry under "gpus", the "serial"; see `_patch`). A process appends one line to
  the file it wrote itself last (one `write`, no new file: a simulated NVML call that changes hardware saves
  before it returns, twice per MIG instance created; encoding one GPU's part instead of the node's is what keeps
  a save cheap with dozens of instances live), and writes the file anew (a temp file renamed over it, one whole
  document) when another process wrote last or the file has grown past `_COMPACT_BYTES`. A kill -9 leaves the old
  state or the new: a line it cut short is the last, and it is passed over (`current_document`);
- the file names the profile it was made from (a digest) and the boot: state of another profile is
  ignored (the node's hardware changed), and the library decides what a reboot keeps (`boot_changed`).

Without a state directory (tests of one backend, `discover`) the state lives in the process only.
A state file that cannot be read or parsed, or whose hardware part is not of the vendor's schema (a pydantic
model: a field of the wrong type is damage like any other), is logged and ignored: the simulation starts from
the profile. A named pipe, symlink or device in its place is refused without waiting (common.node_file).
A state directory that cannot be written is logged once and the state is then kept in the process only:
the simulated hardware never fails a call for it (the driver's own use of the directory reports it).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from dra_driver.common import json_text, node_file
from dra_driver.common.atomic_file import create_temp
from dra_driver.common.boot_id import read_boot_id
from dra_driver.common.logs import fields
from dra_driver.common import file_modes

log = logging.getLogger(__name__)

SUBDIR = "simulated-hardware"
FORMAT_VERSION = 1
_MAX_BYTES = 4 * 1024 * 1024  # a simulated node's state is a few KiB; anything larger is not ours
_COMPACT_BYTES = 64 * 1024  # appended up to this size (a few dozen changes), then written anew


Hardware = TypeVar("Hardware", bound=BaseModel)


@dataclass(frozen=True)
class Loaded(Generic[Hardware]):
    """The hardware part of a state file, checked against the vendor's schema, and whether it was written in an
    earlier boot."""

    hardware: Hardware
    boot_changed: bool


@contextmanager
def changing(state: SimulatedState | None, refresh: Callable[[], None], export: Callable[[], dict[str, Any]]) -> Iterator[None]:
    """A change to simulated hardware: under the state's lock, on its latest saved version (`refresh` reads it if
    another process replaced it), saved after (`export`); in memory only without a state."""
    if state is None:
        yield
        return
    with state.locked():
        refresh()
        yield
        state.save(export())


def profile_digest(section: Any) -> str:
    """A digest of a profile section (JSON-able data): state made from another profile is not this node's."""
    return hashlib.sha256(json.dumps(section, sort_keys=True, default=str).encode()).hexdigest()


class SimulatedState:
    """One simulated library's persistent hardware state (see the module docstring)."""

    def __init__(self, state_dir: Path, vendor: str, digest: str, boot_id: str | None = None) -> None:
        self.directory = state_dir / SUBDIR
        self.path = self.directory / f"{vendor}.json"
        self._lock_path = self.directory / f"{vendor}.lock"
        self._digest = digest
        self._boot_id = read_boot_id() if boot_id is None else boot_id
        # The file last read or written, held open: another process replacing it unlinks this inode (link count 0,
        # see `changed`); timestamps are too coarse for that. Holding none, the inode number last seen at the path.
        self._held: int | None = None
        self._held_inode: int | None = None
        self._held_size: int | None = None  # its size as last read or written: another process's append changes it
        self._appendable = False  # the held file is the one this process wrote last (its temp's descriptor, O_APPEND)
        self._saved: dict[str, Any] | None = None  # the hardware the held file says now, as this process saved it
        self._warned = False
        self._lock_fd: int | None = None

    @classmethod
    def for_settings(cls, state_dir: Path | None, vendor: str, section: Any) -> SimulatedState | None:
        return None if state_dir is None else cls(state_dir, vendor, profile_digest(section))

    def changed(self) -> bool:
        """Whether the file differs from the one this process last read or wrote (no read).

        Asked before every simulated NVML call, so it is one `fstat` of the file held: another process's append
        changes its size; replacing (or removing) the file unlinks the held inode, whose link count drops to 0.
        The state dir is a local file system or a tmpfs (an NFS client would keep a replaced file it holds linked
        under another name). Holding none, the path is looked at.
        """
        if self._held is not None:
            try:
                held = os.fstat(self._held)
            except OSError:
                return True
            return held.st_nlink == 0 or held.st_size != self._held_size
        try:
            inode: int | None = os.stat(self.path).st_ino
        except OSError:  # missing, or a directory that is not one: nothing saved there
            inode = None
        return inode != self._held_inode

    def load(self, schema: type[Hardware]) -> Loaded[Hardware] | None:
        """The hardware state in the file, or None when there is none of this profile, or it is unreadable or
        not of `schema` (a field of the wrong type is damage like any other: logged, and the profile used)."""
        try:
            fd = self._hold()
            if fd is None:
                return None
            raw = node_file.read_fd(fd, self.path, _MAX_BYTES)
            self._held_size = len(raw)
            document = current_document(raw, self.path)
            if not isinstance(document, dict) or not isinstance(document.get("hardware"), dict):
                raise ValueError("not a simulated-hardware state document")
        except (OSError, ValueError) as exc:
            log.warning("simulated hardware state unreadable; starting from the profile", extra=fields(path=str(self.path), error=str(exc)))
            return None
        if document.get("version") != FORMAT_VERSION or document.get("profile") != self._digest:
            log.info("simulated hardware state is of another profile; starting from this one", extra=fields(path=str(self.path)))
            return None
        try:
            hardware = schema.model_validate(document["hardware"])
        except ValidationError as exc:
            problem = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(top)'}: {e['msg']}" for e in exc.errors()[:3])
            log.warning("simulated hardware state unreadable; starting from the profile",
                        extra=fields(path=str(self.path), error=f"hardware.{problem}"))  # fmt: skip
            return None
        return Loaded(hardware, boot_changed=document.get("boot") != self._boot_id)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the exclusive lock for a change (read again with `load` inside if `changed`, then `save`)."""
        if self._lock_fd is None:  # opened once: a prepare changes the hardware several times
            try:
                file_modes.make_dirs(self.directory, file_modes.PRIVATE_DIR)
                self._lock_fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                self._unwritable(exc)
                yield
                return
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def save(self, hardware: dict[str, Any]) -> None:
        """Make `hardware` the current state: its changes appended to the file this process wrote last, else the file
        written anew (call inside `locked`, after reading another process's change: see `changed`). `hardware` is
        kept as the saved state: the caller builds a new one for each save."""
        # Each line starts with a newline, so a line a kill -9 cut short never runs into the next one appended.
        # Not flushed to disk: a kill -9 keeps the page cache, and the state dir is a tmpfs on a node.
        if self._appendable and self._held is not None and self._held_size is not None and not self.changed():
            patch = _patch(self._saved, hardware)
            if patch == {}:
                return  # the file says this already
            line = b"\n" + json.dumps({"patch": patch} if patch is not None else self._document(hardware)).encode()
            if self._held_size + len(line) <= _COMPACT_BYTES and self._append(self._held, line):
                self._saved = hardware
                return
        if self._replace(b"\n" + json.dumps(self._document(hardware)).encode()):
            self._saved = hardware

    def _document(self, hardware: dict[str, Any]) -> dict[str, Any]:
        return {"version": FORMAT_VERSION, "profile": self._digest, "boot": self._boot_id, "hardware": hardware}

    def _append(self, fd: int, line: bytes) -> bool:
        """One line appended to the held file; False (the file to be written anew) when the write fails."""
        try:
            data = memoryview(line)
            while data:
                data = data[os.write(fd, data) :]
        except OSError:
            # Part of the line may be there, cut short like a kill's: the file still reads as the state before this
            # change. That size is ours (no reason to read the file back over this process's state); writing the
            # file anew follows.
            self._appendable = False
            with suppress(OSError):
                self._held_size = os.fstat(fd).st_size
            return False
        self._held_size = (self._held_size or 0) + len(line)
        return True

    def _replace(self, line: bytes) -> bool:
        """The file written anew, one line: a temp file renamed over it (False: it could not be). Its descriptor is
        kept as the file held (a rename keeps the inode) and appended to from then on. Not atomic_file.replace_file:
        this is the simulated hardware's write, which tests counting the driver's writes must not see."""
        try:
            fd, temp = create_temp(str(self.path))
        except OSError as exc:
            self._unwritable(exc)
            return False
        try:
            data = memoryview(line)
            while data:
                data = data[os.write(fd, data) :]
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)  # a peer may append too
            os.replace(temp, self.path)
        except BaseException as exc:
            os.close(fd)
            with suppress(OSError):
                os.unlink(temp)
            if not isinstance(exc, OSError):
                raise
            self._unwritable(exc)
            return False
        self._release()
        self._held, self._held_inode, self._held_size, self._appendable = fd, os.fstat(fd).st_ino, len(line), True
        return True

    def close(self) -> None:
        self._release()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _unwritable(self, exc: OSError) -> None:
        if not self._warned:
            self._warned = True
            log.warning("cannot keep the simulated hardware state; it lives in this process only",
                        extra=fields(path=str(self.path), error=str(exc)))  # fmt: skip

    def _hold(self) -> int | None:
        """Open the file now at the path as the one last seen (None: there is none)."""
        self._release()
        try:
            fd = node_file.open_regular(self.path)  # a pipe or link in its place is refused (load logs it), never waited on
        except (FileNotFoundError, NotADirectoryError):
            return None
        except node_file.NodeFileError:
            with suppress(OSError):  # seen: not read (and logged) again until something replaces it
                self._held_inode = os.stat(self.path).st_ino
            raise
        opened = os.fstat(fd)
        self._held, self._held_inode, self._held_size = fd, opened.st_ino, opened.st_size
        return fd

    def _release(self) -> None:
        if self._held is not None:
            os.close(self._held)
        self._held = self._held_inode = self._held_size = None
        self._appendable = False
        self._saved = None


def _patch(saved: dict[str, Any] | None, hardware: dict[str, Any]) -> dict[str, Any] | None:
    """What changed from `saved` to `hardware`, as a patch line holds it: each top-level value that differs, and of a
    top-level mapping (a vendor's "gpus") only the entries that differ. None when a patch cannot say it (nothing
    saved, a top-level key or a mapping's entry gone): the whole document is written then."""
    if saved is None or saved.keys() - hardware.keys():
        return None
    patch: dict[str, Any] = {}
    for key, value in hardware.items():
        before = saved.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            if before.keys() - value.keys():
                return None
            changed = {name: part for name, part in value.items() if before.get(name) != part}
            if changed:
                patch[key] = changed
        elif before != value or key not in saved:
            patch[key] = value
    return patch


def _applied(document: dict[str, Any], patch: Any) -> dict[str, Any]:
    """`document` with a patch line's changes (see `_patch`); ValueError when it is no patch of such a document."""
    hardware = document.get("hardware")
    if not isinstance(patch, dict) or not isinstance(hardware, dict):
        raise ValueError("a change that is no patch of a simulated-hardware state document")
    merged = dict(hardware)
    for key, value in patch.items():
        before = merged.get(key)
        merged[key] = {**before, **value} if isinstance(value, dict) and isinstance(before, dict) else value
    return {**document, "hardware": merged}


def current_document(raw: bytes, path: Path | str) -> Any:
    """The current document of a state file: its last whole document with the changes appended after it applied. A
    last line that does not parse is a change a kill -9 cut short: passed over (ValueError when nothing is left, or
    any other line does not parse)."""
    lines = [line for line in raw.split(b"\n") if line.strip()]
    if not lines:
        raise ValueError("empty")
    parsed: list[Any] = []
    for number, line in enumerate(lines, start=1):
        try:
            parsed.append(json_text.loads(line))
        except ValueError:
            if number < len(lines) or number == 1:
                raise
            log.info("simulated hardware state: last change cut short (a kill during its save); the state before it is read",
                     extra=fields(path=str(path)))  # fmt: skip
    whole = max((i for i, item in enumerate(parsed) if not (isinstance(item, dict) and "patch" in item)), default=None)
    if whole is None:
        raise ValueError("changes with no state document before them")
    document = parsed[whole]
    for change in parsed[whole + 1 :]:
        if not isinstance(document, dict):
            raise ValueError("not a simulated-hardware state document")
        document = _applied(document, change["patch"])
    return document
