"""What GPU sharing changed for each claim, kept on disk before it is changed, so a crash cannot leak it.

A claim that shares its GPUs changes things outside its CDI spec: an MPS control daemon runs for it, its
GPUs' compute mode may be switched to EXCLUSIVE_PROCESS, their time-slice interval may be set. The plugin
saves a claim's backend state only after `prepare` returns, so these changes are written here first, each
before it is made: the daemon's directory, the GPUs and the compute mode each had before, the interval
asked for. Unprepare (also the rollback of a claim whose state was never saved, and a restart's reconcile)
reads the record back and undoes exactly that; a record whose claim is gone from the checkpoint still
reserves the claim's devices (`recorded_claims`).

Layout: `<dir>/<uid>.json`, one file per claim (claims are serialised per UID, also across the two plugin
instances of a rolling update), replaced atomically and flushed; a UID that is not a plain file name is
stored under its SHA-256. Each file carries the boot ID: daemons, compute modes and intervals do not
survive a reboot, so a record of another boot is void and dropped. A file that cannot be read or parsed is
logged and ignored, never fatal; the next write for the claim replaces it.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dra_driver.common import json_text, node_file
from dra_driver.common import atomic_file
from dra_driver.common.boot_id import read_boot_id
from dra_driver.common.logs import fields
from dra_driver_nvidia.ownership import claim_file_stem, remove_record

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
_SUFFIX = ".json"
MAX_RECORD_BYTES = 1 << 20  # a record is a few hundred bytes


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MpsRecord(_Record):
    """One claim's MPS control daemon: where it lives, what it serves, what it changed."""

    directory: str  # the daemon's own directory (pipe/, log/, shm/ below it)
    gpus: list[str]  # UUIDs it serves, in CUDA_VISIBLE_DEVICES order
    commands: list[str]  # the limit commands sent after start (sent again after a restart)
    # Compute mode of each GPU before this claim set it (only those it changed): restored on unprepare.
    computeModes: dict[str, int] = Field(default_factory=dict)
    pid: int | None = None  # the control daemon, once started
    startTime: int | None = None  # its start time in clock ticks since boot (/proc/<pid>/stat), against PID reuse


class SharingRecord(_Record):
    version: int = FORMAT_VERSION
    bootId: str
    claimUID: str
    devices: list[str]  # device names of the pool the claim holds: reserved while this record exists
    mps: MpsRecord | None = None
    timeSlice: dict[str, int] = Field(default_factory=dict)  # GPU UUID -> interval this claim applied


class SharingRecords:
    """Per-claim sharing records under `directory`; in memory only when it is None."""

    def __init__(self, directory: Path | None, boot_id_path: Path | None = None) -> None:
        self.directory = directory
        self.boot_id = read_boot_id(boot_id_path) if boot_id_path is not None else read_boot_id()
        self._memory: dict[str, SharingRecord] = {}
        self._lock = threading.Lock()

    def new(self, claim_uid: str, devices: list[str]) -> SharingRecord:
        return SharingRecord(bootId=self.boot_id, claimUID=claim_uid, devices=devices)

    def get(self, claim_uid: str) -> SharingRecord | None:
        with self._lock:
            if self.directory is None:
                return self._memory.get(claim_uid)
            record = self._parse(self._path(claim_uid))
            if record is not None and record.claimUID != claim_uid:  # a hashed name shared by two UIDs
                log.warning("sharing record names another claim; ignored", extra=fields(claim=claim_uid, recorded=record.claimUID))
                return None
            return record

    def all(self) -> list[SharingRecord]:
        """Every valid record of this boot, read from disk now (another instance may have written since)."""
        with self._lock:
            if self.directory is None:
                return list(self._memory.values())
            try:
                paths = sorted(self.directory.glob("*" + _SUFFIX))
            except OSError as exc:
                log.warning("sharing records unreadable", extra=fields(path=str(self.directory), error=str(exc)))
                return []
            return [record for path in paths if (record := self._parse(path)) is not None]

    def put(self, record: SharingRecord) -> None:
        """Durable before returning; OSError propagates (the caller must not act unrecorded)."""
        with self._lock:
            if self.directory is None:
                self._memory[record.claimUID] = record
                return
            body = record.model_dump_json(exclude_none=True).encode()
            atomic_file.replace_file(self._path(record.claimUID), body, durable=True)

    def remove(self, claim_uid: str) -> None:
        with self._lock:
            if self.directory is None:
                self._memory.pop(claim_uid, None)
                return
            self._unlink(self._path(claim_uid))

    def _parse(self, path: Path | str) -> SharingRecord | None:
        try:
            raw = node_file.read_regular(path, MAX_RECORD_BYTES)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("sharing record unreadable; ignored", extra=fields(path=str(path), error=str(exc)))
            return None
        try:
            record = SharingRecord.model_validate(json_text.loads(raw))
        except (ValueError, ValidationError) as exc:
            log.warning("sharing record is corrupt; ignored", extra=fields(path=str(path), error=str(exc).splitlines()[0]))
            return None
        if record.version != FORMAT_VERSION:
            log.warning("sharing record of an unknown format; ignored", extra=fields(path=str(path), version=record.version))
            return None
        if record.bootId != self.boot_id:
            log.info("sharing record of another boot; dropped", extra=fields(path=str(path)))
            self._unlink(path)
            return None
        return record

    def _unlink(self, path: Path | str) -> None:
        remove_record(path, "sharing record")

    def _path(self, claim_uid: str) -> str:
        assert self.directory is not None
        return node_file.child_path(self.directory, claim_file_stem(claim_uid) + _SUFFIX)  # a str: see child_path
