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

Layout (claim_files.py, shared with the sharing records): one file per claim,
`<state_dir>/nvidia/mig-owned/<uid>.json`: a claim's first record is created in place, a later change
replaces it atomically (claim_files.py says why a first record cut short is safe, and when records are
flushed). Each change starts from the file as it is on disk, never from memory (a rolling-update peer may have
written it): a prepare's intents are written by creating the file, which fails when one is there already (then
it is read, merged and replaced), so the usual prepare does not read it at all. Each file carries
the boot ID: MIG instances do not survive a reboot, and an instance at the same placement in another boot
(mig-parted at boot time) is an admin's, never ours, so entries of another boot are void. A file that
cannot be read or parsed is logged and ignored (never fatal, and never a reason to destroy anything); the
next write for that claim replaces it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dra_driver.common.boot_id import read_boot_id
from dra_driver_nvidia.claim_files import ClaimFile, ClaimFiles

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
SUBDIR = Path("nvidia") / "mig-owned"
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


class _ClaimFile(ClaimFile):
    instances: list[_EntryFile]


class OwnershipJournal:
    """Per-claim records of owned MIG instances; in memory only when `directory` is None."""

    def __init__(self, directory: Path | None, boot_id_path: Path | None = None) -> None:
        self.directory = directory
        self.boot_id = read_boot_id(boot_id_path) if boot_id_path is not None else read_boot_id()
        self._files = ClaimFiles(directory, _ClaimFile, FORMAT_VERSION, self.boot_id, "MIG ownership record") if directory is not None else None
        self._memory: dict[str, list[OwnedInstance]] = {}  # used when there is no directory
        # Claims inside `held`: their record as last read or written in this call (None: not read yet), and those
        # whose file this call found missing or removed (nothing to remove again: an unprepare drops the entries
        # of the instances it destroyed, then whatever is left, usually nothing).
        self._held: dict[str, list[OwnedInstance] | None] = {}
        self._no_file: set[str] = set()
        self._lock = threading.Lock()

    @classmethod
    def under(cls, state_dir: Path | None, boot_id_path: Path | None = None) -> OwnershipJournal:
        return cls(state_dir / SUBDIR if state_dir is not None else None, boot_id_path)

    @contextmanager
    def held(self, claim_uid: str) -> Iterator[None]:
        """For one prepare or unprepare of the claim: its record is read from disk at most once (or not at all when
        the call creates it) and then kept in memory.

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
                self._no_file.discard(claim_uid)

    # ---- reading -------------------------------------------------------------------

    def entries(self, claim_uid: str) -> list[OwnedInstance]:
        with self._lock:
            return self._read(claim_uid)

    def all_entries(self) -> list[OwnedInstance]:
        """Every valid entry of this boot, read from disk now (another instance may have written since)."""
        with self._lock:
            if self._files is None:
                return [e for entries in self._memory.values() for e in entries]
            return [entry for record in self._files.read_all() for entry in _entries(record)]

    def _read(self, claim_uid: str) -> list[OwnedInstance]:
        if self._files is None:
            return list(self._memory.get(claim_uid, []))
        known = self._held.get(claim_uid)
        if known is not None:
            return list(known)
        record, present = self._files.lookup(claim_uid)
        entries = _entries(record) if record is not None else []
        if claim_uid in self._held:
            self._held[claim_uid] = list(entries)
            if not present:
                self._no_file.add(claim_uid)
        return entries

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
            if self._files is not None and self._held.get(claim_uid) is None:
                # Not read yet: the file is created only if there is none, so there is nothing to merge with (no
                # read: a prepare's usual case); otherwise it is read, merged and replaced as below.
                if self._files.create(claim_uid, self._body(claim_uid, entries)):
                    if claim_uid in self._held:
                        self._held[claim_uid] = list(entries)
                    return
            kept = [e for e in self._read(claim_uid) if e.key not in keys]
            self._write(claim_uid, kept + list(entries))

    def remove(self, claim_uid: str, keys: set[GiKey]) -> None:
        with self._lock:
            entries = self._read(claim_uid)
            kept = [e for e in entries if e.key not in keys]
            if len(kept) != len(entries) or not entries:
                self._write(claim_uid, kept)

    def _write(self, claim_uid: str, entries: list[OwnedInstance]) -> None:
        if self._files is None:
            if entries:
                self._memory[claim_uid] = entries
            else:
                self._memory.pop(claim_uid, None)
            return
        held = claim_uid in self._held
        if not entries and held and claim_uid in self._no_file:
            return  # no file to remove
        if held:
            self._held[claim_uid] = None  # read again if this write fails half-way; set once it is done
            self._no_file.discard(claim_uid)
        if not entries:
            gone = self._files.remove(claim_uid)
            if held:
                self._held[claim_uid] = []
                if gone:
                    self._no_file.add(claim_uid)
            return
        self._files.write(claim_uid, self._body(claim_uid, entries))
        if claim_uid in self._held:
            self._held[claim_uid] = list(entries)

    def _body(self, claim_uid: str, entries: Sequence[OwnedInstance]) -> bytes:
        body = {
            "version": FORMAT_VERSION,
            "bootId": self.boot_id,
            "claimUID": claim_uid,
            "instances": [
                {"device": e.device, "parentUUID": e.parent_uuid, "profileId": e.profile_id, "start": e.start}
                for e in entries
            ],
        }
        return json.dumps(body, sort_keys=True).encode()  # a dict: cheaper than building the model


def _entries(record: _ClaimFile) -> list[OwnedInstance]:
    return [OwnedInstance(record.claimUID, e.device, e.parentUUID, e.profileId, e.start) for e in record.instances]
