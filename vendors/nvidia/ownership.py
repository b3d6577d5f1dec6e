"""Which dynamic MIG instances this driver created, kept on disk so a crash cannot orphan them.

The plugin saves a claim's backend state (the GI/CI IDs) only after `prepare`
returns. A daemon killed in between restarts with no state for the claim, so
without a record of its own the backend cannot tell the instance it created from
one an admin created, and it would leak. The journal closes that gap: before an
instance is created its intent (claim UID, parent GPU, GI profile, placement) is
written, and the entry is removed when the instance is destroyed. Prepare writes the
intents of all of a claim's instances at once before creating the first (one write per
claim). The GI/CI IDs are not journaled: the placement names the instance (reconcile
matches by it), and the IDs are in the claim state the plugin records right after
prepare.

Layout: one file per claim, `<state_dir>/nvidia/mig-owned/<uid>.json` (a UID
that is not a plain file name is stored under its SHA-256), replaced atomically
and flushed on every change. One file per claim because claims are serialised
per UID, also across the two plugin instances of a rolling update, so two
writers never rewrite one file; every change re-reads the file instead of
trusting memory, for the same reason.

Each file carries the boot ID: MIG instances do not survive a reboot, and an
instance at the same placement in another boot (mig-parted at boot time) is an
admin's, never ours, so entries of another boot are void.

A file that cannot be read or parsed is logged and ignored (never fatal, and
never a reason to destroy anything); the next write for that claim replaces it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from dra_driver.common import atomic_file, json_text, node_file
from dra_driver.common.boot_id import read_boot_id
from dra_driver.common.logs import fields

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
SUBDIR = Path("nvidia") / "mig-owned"
_SUFFIX = ".json"
MAX_RECORD_BYTES = 1 << 20  # a record names a few MIG instances
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,199}")
GiKey = tuple[str, int, int]  # (parent GPU uuid, GI profile ID, placement start)


@dataclass(frozen=True)
class OwnedInstance:
    """One instance a claim asked for, by placement (the GI/CI IDs are in the claim state, not here)."""

    claim_uid: str
    device: str
    parent_uuid: str
    profile_id: int
    start: int

    @property
    def key(self) -> GiKey:
        return (self.parent_uuid, self.profile_id, self.start)


class _EntryFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device: str
    parentUUID: str
    profileId: int
    start: int


class _ClaimFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int
    bootId: str
    claimUID: str
    instances: list[_EntryFile]


class OwnershipJournal:
    """Per-claim records of owned MIG instances; in memory only when `directory` is None."""

    def __init__(self, directory: Path | None, boot_id_path: Path | None = None) -> None:
        self.directory = directory
        self.boot_id = read_boot_id(boot_id_path) if boot_id_path is not None else read_boot_id()
        self._memory: dict[str, list[OwnedInstance]] = {}  # used when there is no directory
        # Claims inside `held`: their record as last read or written in this call (None: not read yet).
        self._held: dict[str, list[OwnedInstance] | None] = {}
        self._lock = threading.Lock()

    @classmethod
    def under(cls, state_dir: Path | None, boot_id_path: Path | None = None) -> OwnershipJournal:
        return cls(state_dir / SUBDIR if state_dir is not None else None, boot_id_path)

    @contextmanager
    def held(self, claim_uid: str) -> Iterator[None]:
        """For one prepare or unprepare of the claim: its record is read from disk once and then kept in memory.

        The caller holds the claim (prepares are serialised per UID, also across the plugin instances of a
        rolling update), so nobody else writes its file meanwhile; a later call reads the file again.
        """
        with self._lock:
            self._held[claim_uid] = None
        try:
            yield
        finally:
            with self._lock:
                self._held.pop(claim_uid, None)

    # ---- reading -------------------------------------------------------------------

    def entries(self, claim_uid: str) -> list[OwnedInstance]:
        with self._lock:
            return self._read(claim_uid)

    def all_entries(self) -> list[OwnedInstance]:
        """Every valid entry of this boot, read from disk now (another instance may have written since)."""
        with self._lock:
            if self.directory is None:
                return [e for entries in self._memory.values() for e in entries]
            try:
                paths = sorted(self.directory.glob("*" + _SUFFIX))
            except OSError as exc:
                log.warning("MIG ownership journal unreadable", extra=fields(path=str(self.directory), error=str(exc)))
                return []
            found: list[OwnedInstance] = []
            for path in paths:
                parsed = self._parse(path)
                if parsed is not None:
                    found += parsed[1]
            return found

    def _read(self, claim_uid: str) -> list[OwnedInstance]:
        if self.directory is None:
            return list(self._memory.get(claim_uid, []))
        known = self._held.get(claim_uid)
        if known is not None:
            return list(known)
        entries = self._read_file(claim_uid)
        if claim_uid in self._held:
            self._held[claim_uid] = list(entries)
        return entries

    def _read_file(self, claim_uid: str) -> list[OwnedInstance]:
        parsed = self._parse(self._path(claim_uid))
        if parsed is None:
            return []
        uid, entries = parsed
        if uid != claim_uid:  # a hashed name shared by two UIDs: not this claim's record
            log.warning("MIG ownership record names another claim; ignored", extra=fields(claim=claim_uid, recorded=uid))
            return []
        return entries

    def _parse(self, path: Path | str) -> tuple[str, list[OwnedInstance]] | None:
        """(claim UID, entries), or None for a missing, unreadable, corrupt or other-boot file."""
        try:
            raw = node_file.read_regular(path, MAX_RECORD_BYTES)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("MIG ownership record unreadable; ignored", extra=fields(path=str(path), error=str(exc)))
            return None
        try:
            record = _ClaimFile.model_validate(json_text.loads(raw))
        except (ValueError, ValidationError) as exc:  # json errors are ValueErrors (also bad UTF-8)
            log.warning("MIG ownership record is corrupt; ignored (the instances it named are left alone)",
                        extra=fields(path=str(path), error=str(exc).splitlines()[0]))
            return None
        if record.version != FORMAT_VERSION:
            log.warning("MIG ownership record of an unknown format; ignored", extra=fields(path=str(path), version=record.version))
            return None
        if record.bootId != self.boot_id:
            # Instances never outlive a boot; at these placements now there can only be someone else's.
            log.info("MIG ownership record of another boot; dropped", extra=fields(path=str(path)))
            self._unlink(path)
            return None
        entries = [
            OwnedInstance(record.claimUID, e.device, e.parentUUID, e.profileId, e.start) for e in record.instances
        ]
        return record.claimUID, entries

    # ---- writing (OSError propagates: the caller decides whether that is fatal) -----------

    def record(self, *entries: OwnedInstance) -> None:
        """Add or update entries of one claim (by placement) in one write; durable before returning.

        Prepare records all intents of a claim in one call, so a claim costs one write whatever
        its number of instances.
        """
        if not entries:
            return
        claim_uid = entries[0].claim_uid
        if any(entry.claim_uid != claim_uid for entry in entries):
            raise ValueError("OwnershipJournal.record takes the entries of one claim at a time")
        keys = {entry.key for entry in entries}
        with self._lock:
            kept = [e for e in self._read(claim_uid) if e.key not in keys]
            self._write(claim_uid, kept + list(entries))

    def remove(self, claim_uid: str, keys: set[GiKey]) -> None:
        with self._lock:
            entries = self._read(claim_uid)
            kept = [e for e in entries if e.key not in keys]
            if len(kept) != len(entries) or not entries:
                self._write(claim_uid, kept)

    def _write(self, claim_uid: str, entries: list[OwnedInstance]) -> None:
        if self.directory is None:
            if entries:
                self._memory[claim_uid] = entries
            else:
                self._memory.pop(claim_uid, None)
            return
        path = self._path(claim_uid)
        if claim_uid in self._held:
            self._held[claim_uid] = None  # read again if this write fails half-way; set once it is done
        if not entries:
            self._unlink(path)
            if claim_uid in self._held:
                self._held[claim_uid] = []
            return
        body = {
            "version": FORMAT_VERSION,
            "bootId": self.boot_id,
            "claimUID": claim_uid,
            "instances": [
                {"device": e.device, "parentUUID": e.parent_uuid, "profileId": e.profile_id, "start": e.start}
                for e in entries
            ],
        }
        atomic_file.replace_file(path, json.dumps(body, sort_keys=True).encode(), durable=True)
        if claim_uid in self._held:
            self._held[claim_uid] = list(entries)

    def _unlink(self, path: Path | str) -> None:
        remove_record(path, "MIG ownership record")

    def _path(self, claim_uid: str) -> str:
        assert self.directory is not None
        return node_file.child_path(self.directory, claim_file_stem(claim_uid) + _SUFFIX)  # a str: see child_path


def claim_file_stem(claim_uid: str) -> str:
    """A file (or directory) name for a claim's record: the UID when it is a plain name, its SHA-256 otherwise."""
    if _PLAIN_NAME.fullmatch(claim_uid):
        return claim_uid
    return "sha256-" + hashlib.sha256(claim_uid.encode()).hexdigest()


def remove_record(path: Path | str, what: str) -> None:
    """Remove a record file; gone already is fine, a failure is logged (a stale record is dropped at a later start)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning(f"cannot remove {what}", extra=fields(path=str(path), error=str(exc)))
