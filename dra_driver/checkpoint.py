"""The plugin's on-disk record of prepared claims.

Two phases per claim: `PrepareStarted` is written before the backend touches
the hardware and `PrepareCompleted` after the CDI spec is on disk, so a crash
in between leaves a record that the next start rolls back. The file is one
JSON document with a SHA-256 checksum over its content, written atomically
(temp file, fsync, rename). It is tied to the boot ID: after a reboot nothing
that was prepared exists any more (CDI specs live on tmpfs, partitions are
gone), so a checkpoint from another boot is treated as empty.

A corrupt file is never fatal: it is logged, moved aside and replaced by an
empty checkpoint, because a crash loop would block every pod on the node.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dra_driver.logs import fields

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
DEFAULT_BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
PREPARE_STARTED = "PrepareStarted"
PREPARE_COMPLETED = "PrepareCompleted"
Phase = Literal["PrepareStarted", "PrepareCompleted"]


@dataclass
class CheckpointDevice:
    request: str  # base request name
    pool: str
    device: str
    admin_access: bool = False
    share_id: str | None = None
    cdi_ids: list[str] = field(default_factory=list)


@dataclass
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    phase: Phase
    devices: list[CheckpointDevice] = field(default_factory=list)
    backend_state: dict[str, Any] = field(default_factory=dict)
    cdi_spec: str | None = None  # path of the claim's spec file once written

    @property
    def completed(self) -> bool:
        return self.phase == PREPARE_COMPLETED

    def to_json(self) -> dict[str, Any]:
        """The same content as dataclasses.asdict, without its deep copy (the result is only serialised)."""
        return {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "phase": self.phase,
            "devices": [vars(d) for d in self.devices],
            "backend_state": self.backend_state,
            "cdi_spec": self.cdi_spec,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClaimRecord:
        devices = [CheckpointDevice(**d) for d in data.get("devices", [])]
        return cls(
            uid=data["uid"],
            namespace=data["namespace"],
            name=data["name"],
            phase=data["phase"],
            devices=devices,
            backend_state=dict(data.get("backend_state") or {}),
            cdi_spec=data.get("cdi_spec"),
        )


class CheckpointCorrupt(Exception):
    pass


def read_boot_id(path: Path = DEFAULT_BOOT_ID_PATH) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        # Without a boot ID (non-Linux, tests) state survives restarts; that is the safe side.
        return ""


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(_canonical(body).encode()).hexdigest()


class Checkpoint:
    """Thread-safe claim records, persisted on every change."""

    def __init__(self, path: Path, boot_id_path: Path = DEFAULT_BOOT_ID_PATH) -> None:
        self.path = path
        self.boot_id = read_boot_id(boot_id_path)
        self._claims: dict[str, ClaimRecord] = {}
        self._texts: dict[str, str] = {}  # uid -> '"<uid>":<canonical JSON of the record>'
        self._lock = threading.Lock()  # guards the in-memory state
        self._write_lock = threading.Lock()  # one file write at a time
        self._version = 0  # changes made in memory
        self._written = 0  # changes in the file (visible to a restarted process)
        self._durable = 0  # changes in the file and flushed to the device
        self._completed_devices = 0
        # (pool, device) -> uid -> (record, the record's entry for that device)
        self._holders: dict[tuple[str, str], dict[str, tuple[ClaimRecord, CheckpointDevice]]] = {}

    # --- loading -------------------------------------------------------------

    def load(self) -> None:
        """Read the file; a missing, stale-boot or corrupt file yields an empty checkpoint."""
        claims = self._read()
        with self._lock:
            self._claims = claims
            self._completed_devices = 0
            self._holders = {}
            for rec in claims.values():
                self._account(rec, 1)
            self._texts = {uid: _piece(rec) for uid, rec in claims.items()}

    def _read(self) -> dict[str, ClaimRecord]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            body = self._parse(raw)
        except CheckpointCorrupt as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            os.replace(self.path, aside)
            log.error(
                "checkpoint %s is corrupt (%s); moved aside to %s and starting empty: claims prepared before are forgotten",
                self.path,
                exc,
                aside,
                extra=fields(path=str(self.path), moved_to=str(aside), reason=str(exc)),
            )
            return {}
        if body.get("boot_id") != self.boot_id:
            log.warning(
                "checkpoint is from another boot; prepared state is void",
                extra=fields(path=str(self.path), checkpoint_boot=body.get("boot_id"), boot=self.boot_id),
            )
            return {}
        return {uid: ClaimRecord.from_json(rec) for uid, rec in body.get("claims", {}).items()}

    @staticmethod
    def _parse(raw: bytes) -> dict[str, Any]:
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise CheckpointCorrupt(f"not JSON: {exc}") from exc
        if not isinstance(doc, dict) or not isinstance(doc.get("body"), dict):
            raise CheckpointCorrupt("missing 'body' object")
        if doc.get("checksum") != _checksum(doc["body"]):
            raise CheckpointCorrupt("checksum mismatch")
        body = doc["body"]
        if body.get("version") != FORMAT_VERSION:
            raise CheckpointCorrupt(f"unknown format version {body.get('version')!r}")
        try:
            for rec in body.get("claims", {}).values():
                ClaimRecord.from_json(rec)
        except (KeyError, TypeError) as exc:
            raise CheckpointCorrupt(f"malformed claim record: {exc}") from exc
        return body

    # --- queries -------------------------------------------------------------

    def get(self, uid: str) -> ClaimRecord | None:
        with self._lock:
            return self._claims.get(uid)

    def records(self) -> list[ClaimRecord]:
        with self._lock:
            return list(self._claims.values())

    # --- changes (each persisted before returning) -----------------------------

    def put(self, record: ClaimRecord, durable: bool = True) -> None:
        """Store and write the record; `durable=False` skips the device flush.

        A non-durable write is still atomic and visible to a restarted process
        (the page cache survives a process crash); only a power loss can undo
        it, and after a reboot the checkpoint is void anyway (boot ID). Use it
        for intermediate states that a later durable write supersedes.
        """
        self.commit(self.stage(record), durable)

    def stage(self, record: ClaimRecord) -> int:
        """Store the record in memory only; returns the version to pass to commit().

        Lets a caller decide under its own lock (e.g. a device conflict check)
        and write outside it, so concurrent claims share one file write.
        """
        piece = _piece(record)
        with self._lock:
            self._account(self._claims.get(record.uid), -1)
            self._claims[record.uid] = record
            self._account(record, 1)
            self._texts[record.uid] = piece
            self._version += 1
            return self._version

    def commit(self, version: int, durable: bool = True) -> None:
        """Return once the file holds every change up to `version` (flushed to the device if durable)."""
        self._flush(version, durable)

    def completed_device_count(self) -> int:
        """Devices of completed claims, kept up to date on every change (a metrics gauge reads it per call)."""
        with self._lock:
            return self._completed_devices

    def holders(self, pool: str, device: str) -> list[tuple[ClaimRecord, CheckpointDevice]]:
        """The claims (any phase) whose records name this device, each with its entry for it."""
        with self._lock:
            return list(self._holders.get((pool, device), {}).values())

    def _account(self, record: ClaimRecord | None, sign: int) -> None:
        """Add (+1) or take out (-1) a record's share of the derived counters and the device index."""
        if record is None:
            return
        if record.completed:
            self._completed_devices += sign * len(record.devices)
        for dev in record.devices:
            key = (dev.pool, dev.device)
            if sign > 0:
                self._holders.setdefault(key, {})[record.uid] = (record, dev)
            else:
                holders = self._holders.get(key, {})
                holders.pop(record.uid, None)
                if not holders:
                    self._holders.pop(key, None)

    def remove(self, uid: str) -> None:
        version = self._drop(uid)
        if version is not None:
            self._flush(version)

    def forget(self, uid: str) -> None:
        """Drop a staged record whose commit failed; the file catches up on the next write.

        If the file already holds it, a restart rolls that half-prepared claim back,
        which is harmless because nothing was done for it yet.
        """
        self._drop(uid)

    def _drop(self, uid: str) -> int | None:
        with self._lock:
            record = self._claims.pop(uid, None)
            if record is None:
                return None
            self._account(record, -1)
            self._texts.pop(uid, None)
            self._version += 1
            return self._version

    def _flush(self, version: int, durable: bool = True) -> None:
        """Group commit: one writer at a time; a write that already covers `version` serves its caller too."""
        with self._write_lock:
            if (self._durable if durable else self._written) >= version:
                return
            with self._lock:
                snapshot = self._version
                # Canonical JSON assembled from per-record pieces cached at put(): keys sorted
                # (boot_id < claims < version), so the checksum matches _checksum(body) on load
                # without re-serialising every record on every write.
                claims = ",".join([self._texts[uid] for uid in sorted(self._texts)])
            body = f'{{"boot_id":{json.dumps(self.boot_id)},"claims":{{{claims}}},"version":{FORMAT_VERSION}}}'.encode()
            digest = hashlib.sha256(body).hexdigest().encode()
            self._write_file(b'{"body":' + body + b',"checksum":"' + digest + b'"}', durable)
            self._written = snapshot
            if durable:
                self._durable = snapshot

    def _write_file(self, data: bytes, durable: bool) -> None:
        """Temp file, data flush, rename: readers see the old or the new file, never a mix."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A random temp name (mkstemp): two instances in a rolling update both run as
        # PID 1 in their pods, so a pid-based name would be shared by both writers.
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if durable:
                    _datasync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise


def _piece(record: ClaimRecord) -> str:
    """One record's member of the canonical `claims` object, cached so a write only joins strings."""
    return f"{json.dumps(record.uid)}:{_canonical(record.to_json())}"


def _datasync(fd: int) -> None:
    # fdatasync flushes the data and the metadata needed to read it back (size), skipping timestamps.
    sync = getattr(os, "fdatasync", os.fsync)
    sync(fd)
