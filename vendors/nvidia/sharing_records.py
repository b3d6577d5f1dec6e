"""What GPU sharing changed for each claim, kept on disk before it is changed, so a crash cannot leak it.

A claim that shares its GPUs changes things outside its CDI spec: an MPS control daemon runs for it, its
GPUs' compute mode may be switched to EXCLUSIVE_PROCESS, their time-slice interval may be set. The plugin
saves a claim's backend state only after `prepare` returns, so these changes are written here first, each
before it is made: the daemon's directory, the GPUs and the compute mode each had before, the interval
asked for. Unprepare (also the rollback of a claim whose state was never saved, and a restart's reconcile)
reads the record back and undoes exactly that; a record whose claim is gone from the checkpoint still
reserves the claim's devices (`recorded_claims`).

Layout (claim_files.py, shared with the MIG ownership journal): `<dir>/<uid>.json`, one file per claim,
replaced atomically and flushed. Each file carries the boot ID: daemons, compute modes and intervals do not
survive a reboot, so a record of another boot is void and dropped. A file that cannot be read or parsed is
logged and ignored, never fatal; the next write for the claim replaces it.
"""

from __future__ import annotations

import threading
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from dra_driver.common.boot_id import read_boot_id
from dra_driver_nvidia.claim_files import ClaimFile, ClaimFiles

FORMAT_VERSION = 1


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


class SharingRecord(ClaimFile):
    version: int = FORMAT_VERSION
    devices: list[str]  # device names of the pool the claim holds: reserved while this record exists
    mps: MpsRecord | None = None
    timeSlice: dict[str, int] = Field(default_factory=dict)  # GPU UUID -> interval this claim applied


class SharingRecords:
    """Per-claim sharing records under `directory`; in memory only when it is None."""

    def __init__(self, directory: Path | None, boot_id_path: Path | None = None) -> None:
        self.directory = directory
        self.boot_id = read_boot_id(boot_id_path) if boot_id_path is not None else read_boot_id()
        self._files = ClaimFiles(directory, SharingRecord, FORMAT_VERSION, self.boot_id, "sharing record") if directory is not None else None
        self._memory: dict[str, SharingRecord] = {}
        self._lock = threading.Lock()

    def new(self, claim_uid: str, devices: list[str]) -> SharingRecord:
        return SharingRecord(bootId=self.boot_id, claimUID=claim_uid, devices=devices)

    def get(self, claim_uid: str) -> SharingRecord | None:
        with self._lock:
            if self._files is None:
                return self._memory.get(claim_uid)
            return self._files.read(claim_uid)

    def all(self) -> list[SharingRecord]:
        """Every valid record of this boot, read from disk now (another instance may have written since)."""
        with self._lock:
            if self._files is None:
                return list(self._memory.values())
            return self._files.read_all()

    def put(self, record: SharingRecord) -> None:
        """Durable before returning; OSError propagates (the caller must not act unrecorded)."""
        with self._lock:
            if self._files is None:
                self._memory[record.claimUID] = record
                return
            self._files.write(record.claimUID, record.model_dump_json(exclude_none=True).encode())

    def remove(self, claim_uid: str) -> None:
        with self._lock:
            if self._files is None:
                self._memory.pop(claim_uid, None)
                return
            self._files.remove(claim_uid)
