"""One directory of per-claim record files: the one reader and writer of the MIG ownership journal (ownership.py) and
the sharing records (sharing_records.py).

Layout: `<directory>/<uid>.json`, one file per claim (claims are serialised per UID, also across the two plugin
instances of a rolling update, so two writers never rewrite one file); a UID that is not a plain file name is stored
under its SHA-256. Every file carries its format version, the boot ID and the claim UID: what a record names (MIG
instances, MPS daemons, compute modes) does not survive a reboot, so a record of another boot is void and dropped.

Writing: a claim's first record is created in place (`O_CREAT|O_EXCL|O_NOFOLLOW`: never over a file or a link), a
later one replaces the file atomically (temp file and rename). The first write needs no temp file: what was there
before it is nothing, and a record cut short (kill -9 between the create and the write) is a JSON document without
its closing brace, which never parses: it is corrupt, ignored like any damaged record, names nothing, and what it
would have named had not been made yet (every record is written before the change it records). Records are
flushed to the device only when there is no boot ID (as the plugin's checkpoint: docs/plugin.md "Checkpoint"): with
one, a record is in the page cache once written, which a killed daemon cannot lose, and what loses the page cache
(kernel crash, power loss) reboots the node, which voids every record.

Reading never trusts the file: no symlink is followed, anything but a regular file is refused without blocking
(a named pipe), at most `max_bytes` are read (common.node_file). A file that cannot be read or parsed, of another
format, or naming another claim is logged and ignored, never fatal and never a reason to act on what it names; the
next write for the claim replaces it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from dra_driver.common import atomic_file, file_modes, json_text, node_file
from dra_driver.common.logs import fields

log = logging.getLogger(__name__)

SUFFIX = ".json"
MAX_RECORD_BYTES = 1 << 20  # a record names a few MIG instances or one MPS daemon: a few hundred bytes
# A claim's first record: a new file only, never through a link or over anything already there.
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
_FILE_MODE = 0o600


class ClaimFile(BaseModel):
    """What every record file holds besides its kind's own fields."""

    model_config = ConfigDict(extra="forbid")

    version: int
    bootId: str
    claimUID: str


Record = TypeVar("Record", bound=ClaimFile)


class ClaimFiles(Generic[Record]):
    """The record files of one kind (`model`, format `version`) under `directory`; `what` names them in log lines."""

    def __init__(self, directory: Path, model: type[Record], version: int, boot_id: str, what: str, max_bytes: int = MAX_RECORD_BYTES) -> None:
        self.directory = directory
        self._model = model
        self._version = version
        self._boot_id = boot_id
        self._what = what
        self._max_bytes = max_bytes
        self._durable = not boot_id  # flushed only when a reboot would not void the records: see the module docstring

    def path(self, claim_uid: str) -> str:
        return node_file.child_path(self.directory, node_file.claim_file_stem(claim_uid) + SUFFIX)  # a str: see child_path

    def read(self, claim_uid: str) -> Record | None:
        """The claim's record; None when there is none or it is unusable (logged)."""
        return self.lookup(claim_uid)[0]

    def lookup(self, claim_uid: str) -> tuple[Record | None, bool]:
        """The claim's record as `read` gives it, and whether anything is at its path (a file to remove or replace)."""
        path = self.path(claim_uid)
        try:
            record = self._parse(path, missing_raises=True)
        except FileNotFoundError:
            return None, False
        if record is not None and record.claimUID != claim_uid:  # a hashed name shared by two UIDs: not this claim's
            log.warning(f"{self._what} names another claim; ignored", extra=fields(claim=claim_uid, recorded=record.claimUID))
            return None, True
        return record, True

    def read_all(self) -> list[Record]:
        """Every usable record of this boot, read from disk now (another instance may have written since)."""
        try:
            paths = sorted(self.directory.glob("*" + SUFFIX))
        except OSError as exc:
            log.warning(f"{self._what}s unreadable", extra=fields(path=str(self.directory), error=str(exc)))
            return []
        return [record for path in paths if (record := self._parse(path)) is not None]

    def write(self, claim_uid: str, body: bytes) -> None:
        """Make `body` (one JSON document of `model`, nothing after its closing brace) the claim's record: readers
        see nothing or the whole record when it is the first, the old or the new one after. OSError propagates (the
        caller must not act unrecorded)."""
        if not self.create(claim_uid, body):
            atomic_file.replace_file(self.path(claim_uid), body, durable=self._durable)  # replaced whole

    def create(self, claim_uid: str, body: bytes) -> bool:
        """Write `body` as the claim's first record; False, writing nothing, when something is at its path already
        (a record to merge with or replace, or anything else). The directory is made when missing. OSError
        propagates."""
        path = self.path(claim_uid)
        try:
            try:
                fd = os.open(path, _NEW_FILE_FLAGS, _FILE_MODE)
            except FileNotFoundError:
                file_modes.make_dirs(self.directory, file_modes.CDI_DIR)  # as atomic_file.replace_file makes it
                fd = os.open(path, _NEW_FILE_FLAGS, _FILE_MODE)
        except FileExistsError:
            return False
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view) :]
            if self._durable:
                atomic_file.datasync(fd)
        except BaseException:
            remove_record(path, self._what)  # a failed write leaves no record behind (a kill -9 leaves a torn one)
            raise
        finally:
            os.close(fd)
        return True

    def remove(self, claim_uid: str) -> bool:
        """Whether the claim's file is gone now (a failure is logged)."""
        return remove_record(self.path(claim_uid), self._what)

    def _parse(self, path: Path | str, missing_raises: bool = False) -> Record | None:
        """The record at `path`, or None for a missing (FileNotFoundError with `missing_raises`), unreadable, corrupt,
        other-format or other-boot file."""
        try:
            raw = node_file.read_regular(path, self._max_bytes)
        except FileNotFoundError:
            if missing_raises:
                raise
            return None
        except OSError as exc:  # a pipe, a link, a directory, too large, no permission
            log.warning(f"{self._what} unreadable; ignored", extra=fields(path=str(path), error=str(exc)))
            return None
        try:
            record = self._model.model_validate(json_text.loads(raw))
        except (ValueError, ValidationError) as exc:  # json errors are ValueErrors (also bad UTF-8)
            log.warning(f"{self._what} is corrupt; ignored (nothing it names is acted on)",
                        extra=fields(path=str(path), error=str(exc).splitlines()[0]))  # fmt: skip
            return None
        if record.version != self._version:
            log.warning(f"{self._what} of an unknown format; ignored", extra=fields(path=str(path), version=record.version))
            return None
        if record.bootId != self._boot_id:
            # What it names never outlives a boot: at its places now there can only be someone else's.
            log.info(f"{self._what} of another boot; dropped", extra=fields(path=str(path)))
            remove_record(path, self._what)
            return None
        return record


def remove_record(path: Path | str, what: str) -> bool:
    """Remove a record file; gone already is fine, a failure is logged (a stale record is dropped at a later start).
    Whether it is gone now."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning(f"cannot remove {what}", extra=fields(path=str(path), error=str(exc)))
        return False
    return True
