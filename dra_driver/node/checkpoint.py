"""The plugin's on-disk record of prepared claims: one small file per claim.

Two phases per claim: `PrepareStarted` is written before the backend touches
the hardware and `PrepareCompleted` after the CDI spec is on disk, so a crash
in between leaves a record that the next start rolls back.

Layout (format 2): a directory with one append-only file per claim,
`<uid>.json` (a UID that is not a plain file name is stored under the SHA-256
of the UID; the record inside names its UID). Each change appends one line,
`{"body": {...}, "checksum": sha256(canonical body)}`, whose body holds the
boot ID, the format version and the claim's whole record; the last line with
a valid checksum is the claim's state. A write therefore costs the same
whatever the number of live claims, needs no temp file or rename, and two
claims never wait for each other's write. Every line starts with a newline
so a torn line can never swallow the next one appended after it.

Every record carries the boot ID: after a reboot nothing that was prepared
exists any more (CDI specs live on tmpfs, partitions are gone), so records
from another boot are void and deleted on load. That is also why writes are
not flushed to the device (no fdatasync) when a boot ID is known: a record
is in the page cache once write() returns, which a killed or crashed daemon
cannot lose; only a kernel crash or power loss can, and either one reboots
the node, after which the record would be void anyway. Without a boot ID
(non-Linux) records outlive reboots, so "durable" writes are flushed.

Damage is never fatal and never silently frees a device. A record file whose
last line fails its checksum (complete or cut short: a truncation long after
the claim was answered looks the same as an append cut short by a crash), a
symlink or a directory in a record's place, or a line naming another claim:
the file is logged, moved aside
(`<file>.corrupt-<time>`, never loaded again) and reported in `damaged` with
what could be read from it (the claim UID from the file name, an earlier
line whose checksum holds, the devices of the damaged line as far as it
parses). Start-up recovery (dra_driver/node/plugin/recovery.py) turns that, with
the claim's CDI spec and the backend's own records, back into a reservation.
A checkpoint path
that is not a directory is moved aside the same way; an unreadable one is
reported and the driver keeps serving. A crash loop would block every pod on
the node.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal

from dra_driver.common import atomic_file, node_file
from dra_driver.common.boot_id import DEFAULT_BOOT_ID_PATH, read_boot_id
from dra_driver.common import file_modes
from dra_driver.common.logs import fields
from dra_driver.common.signed_json import SignedJsonError, body_as_written, canonical, verified_body

log = logging.getLogger(__name__)

# A record file holds a few phase lines of one claim, each with its CDI spec text (KiBs); far more is not ours.
MAX_RECORD_FILE_BYTES = 64 << 20

FORMAT_VERSION = 2
PREPARE_STARTED: Final = "PrepareStarted"
PREPARE_COMPLETED: Final = "PrepareCompleted"
# Written before unprepare touches anything: a crash from then on finishes the unprepare
# (at the next start, or before the claim is prepared again) instead of answering from a
# record whose backend state or spec is already gone.
UNPREPARE_STARTED: Final = "UnprepareStarted"
Phase = Literal["PrepareStarted", "PrepareCompleted", "UnprepareStarted"]
_RECORD_SUFFIX = ".json"
_HASHED_NAME = re.compile(node_file.HASHED_PREFIX + r"[0-9a-f]{64}")


@dataclass
class CheckpointDevice:
    request: str  # base request name
    pool: str
    device: str
    admin_access: bool = False
    share_id: str | None = None
    cdi_ids: list[str] = field(default_factory=list)
    # A consumable-capacity share's consumedCapacity (name -> quantity as the scheduler wrote it): what it takes of
    # the device, counted against the device's capacity when another share is prepared (also after a restart).
    consumed: dict[str, str] = field(default_factory=dict)


@dataclass
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    phase: Phase
    devices: list[CheckpointDevice] = field(default_factory=list)
    backend_state: dict[str, Any] = field(default_factory=dict)
    cdi_spec: str | None = None  # path of the claim's spec file once written
    spec_json: str | None = None  # the spec file's content as written, so a lost spec can be rewritten
    recovered: str = ""  # rebuilt at start-up from evidence: what it was rebuilt from (empty: written by prepare)
    # In memory only: the record's file holds spec_json, which the copy in memory leaves out (a spec is ~6 KiB,
    # more than the rest of a claim's state; it is needed only to rewrite a lost spec: Checkpoint.spec_text).
    spec_on_disk: bool = False

    @property
    def answerable(self) -> bool:
        """Whether a lost spec can be rewritten from the record (its text is in memory or in the record's file)."""
        return self.spec_json is not None or self.spec_on_disk

    @property
    def completed(self) -> bool:
        return self.phase == PREPARE_COMPLETED

    def to_json(self) -> dict[str, Any]:
        """The same content as dataclasses.asdict, without its deep copy (the result is only serialised).

        The two later fields are written only when set, which keeps records small.
        """
        out = {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "phase": self.phase,
            "devices": [vars(d) if d.consumed else _without_consumed(d) for d in self.devices],
            "backend_state": self.backend_state,
            "cdi_spec": self.cdi_spec,
        }
        if self.spec_json is not None:
            out["spec_json"] = self.spec_json
        if self.recovered:
            out["recovered"] = self.recovered
        return out

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
            spec_json=data.get("spec_json"),
            recovered=str(data.get("recovered") or ""),
        )


def _without_consumed(device: CheckpointDevice) -> dict[str, Any]:
    """A device entry without the empty `consumed` key: the records of claims without shares stay as they were."""
    out = dict(vars(device))
    del out["consumed"]
    return out


class CheckpointCorrupt(Exception):
    pass


@dataclass
class DamagedRecord:
    """A record file (or the record directory) that could not be trusted; what could be read from it.

    `last_good` passed its checksum (trusted, maybe not the claim's latest state);
    `salvaged` is the damaged line as far as it parses: its devices may only add
    reservations, nothing in it is ever acted on.
    """

    path: Path
    reason: str
    uid: str | None  # the claim it held (file name or a line naming it); None when unknowable
    moved_to: Path | None  # where it was set aside; None if it could not be moved
    last_good: ClaimRecord | None = None
    salvaged: ClaimRecord | None = None


class Checkpoint:
    """Thread-safe claim records, each persisted in its own file on every change."""

    def __init__(self, path: Path, boot_id_path: Path = DEFAULT_BOOT_ID_PATH) -> None:
        self.path = path  # the directory of record files
        self.boot_id = read_boot_id(boot_id_path)
        # Flushing buys nothing when a reboot voids the records (see the module docstring).
        self.flush = not self.boot_id
        self._claims: dict[str, ClaimRecord] = {}
        self._lock = threading.Lock()  # guards the in-memory state
        self._durable: dict[str, ClaimRecord] = {}  # uid -> the record object last flushed to the device
        self._written: dict[str, ClaimRecord] = {}  # uid -> the record object last written (maybe not flushed)
        # file name -> (stat stamp, record): a reload re-reads only files that changed.
        self._files: dict[str, tuple[tuple[int, int, int], ClaimRecord]] = {}
        self._completed_devices = 0
        # (pool, device) -> uid -> (record, the record's entry for that device)
        self._holders: dict[tuple[str, str], dict[str, tuple[ClaimRecord, CheckpointDevice]]] = {}
        self.damaged: list[DamagedRecord] = []  # found by loads, taken by recovery

    # --- loading -------------------------------------------------------------

    def load(self) -> None:
        """Read the record files; bad or stale files are set aside.

        Other processes must not write meanwhile (it may set aside or remove what
        it reads): the plugin loads at start-up, or under the shared lock in
        rolling-update mode, where every write also happens under that lock.
        """
        claims = self._read_dir()
        with self._lock:
            self._claims = claims
            self._written = dict(claims)
            self._durable = dict(claims)
            self._completed_devices = 0
            self._holders = {}
            for rec in claims.values():
                self._account(rec, 1)

    def _read_dir(self) -> dict[str, ClaimRecord]:
        try:
            entries = list(os.scandir(self.path))
        except FileNotFoundError:
            self._files = {}
            return {}
        except OSError as exc:  # a file in the directory's place, or unreadable: serve without, never stop
            self._files = {}
            self._directory_damaged(exc)
            return {}
        files: dict[str, tuple[tuple[int, int, int], ClaimRecord]] = {}
        stale_boot = 0
        for entry in entries:
            if entry.name.startswith("."):
                if entry.name.endswith(atomic_file.TEMP_SUFFIX):
                    _unlink_quietly(Path(entry.path))  # an atomic rewrite killed half-way; loads run alone
                continue
            if not entry.name.endswith(_RECORD_SUFFIX):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # removed meanwhile (another instance)
                continue
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            cached = self._files.get(entry.name)
            if cached is not None and cached[0] == stamp:
                files[entry.name] = cached
                continue
            record = self._read_record(Path(entry.path))
            if record is _STALE:
                stale_boot += 1
            elif isinstance(record, ClaimRecord):
                files[entry.name] = (stamp, record)
        if stale_boot:
            log.warning(
                "checkpoint records from another boot are void; removed",
                extra=fields(path=str(self.path), records=stale_boot, boot=self.boot_id),
            )
        self._files = files
        return {rec.uid: rec for _, rec in files.values()}

    def _directory_damaged(self, exc: OSError) -> None:
        """The record directory cannot be listed: move a non-directory aside (and start a fresh one)."""
        reason = f"checkpoint directory unusable: {exc.strerror or exc}"
        moved = None
        if exc.errno == errno.ENOTDIR:
            moved = _set_aside(self.path, reason, "the claims it held are rebuilt from their CDI specs where possible")
            try:
                file_modes.make_dirs(self.path, file_modes.PRIVATE_DIR)
            except OSError as mkdir_exc:
                log.error("cannot create the checkpoint directory", extra=fields(path=str(self.path), error=str(mkdir_exc)))
        else:
            log.error(
                "checkpoint directory %s is unreadable (%s); claims recorded there are unknown until it is fixed",
                self.path, exc.strerror or exc, extra=fields(path=str(self.path), error=str(exc)),
            )
        self._report(DamagedRecord(self.path, reason, None, moved))

    def _read_record(self, path: Path) -> ClaimRecord | object | None:
        """The record in `path`; _STALE (file removed) for another boot; None for no record
        (empty, gone, or damaged: then set aside and reported in `damaged`)."""
        try:
            raw = _read_regular_file(path)
        except FileNotFoundError:
            return None
        except (OSError, CheckpointCorrupt) as exc:  # a symlink, a directory, unreadable
            self._damaged(path, str(exc), [], None)
            return None
        lines = [line for line in raw.split(b"\n") if line]
        if not lines:
            # Created but its first line never written (a crash before anything was done for the
            # claim; every write happens under the same exclusion as a load): no record. Removed,
            # or it would stay until the next reboot (found by bench/bench_kill_loop.py).
            _unlink(path)
            return None
        try:
            record = self._record_of_line(lines[-1], path, keep_spec=False)
        except CheckpointCorrupt as exc:
            # Even a last line cut short is damage, not "the append before the crash": the claim
            # may have been answered long ago and the file truncated since. Recovery decides with
            # the claim's spec in hand; an earlier valid line goes along as evidence.
            torn = "" if raw.endswith(b"\n") else " (last line cut short)"
            self._damaged(path, f"{exc}{torn}", lines, self._last_valid_line(lines[:-1], path))
            return None
        if record is _STALE:
            _unlink(path)
        return record

    def _last_valid_line(self, lines: list[bytes], path: Path) -> ClaimRecord | None:
        for line in reversed(lines):
            try:
                record = self._record_of_line(line, path)
            except CheckpointCorrupt:
                continue
            return record if isinstance(record, ClaimRecord) else None  # another boot's line proves nothing now
        return None

    def _damaged(self, path: Path, reason: str, lines: list[bytes], last_good: ClaimRecord | None) -> None:
        salvaged = _salvage_line(lines[-1], self.boot_id) if lines else None
        if salvaged is not None and _file_name(salvaged.uid) != path.name:
            salvaged = None  # another claim's content: says nothing about this claim's devices
        uid = _uid_of_file_name(path.name) or (last_good.uid if last_good else None) or (salvaged.uid if salvaged else None)
        moved = _set_aside(path, reason, "its devices stay reserved while its CDI spec or backend records prove it prepared")
        self._report(DamagedRecord(path, reason, uid, moved, last_good, salvaged))

    def _report(self, damage: DamagedRecord) -> None:
        with self._lock:
            self.damaged.append(damage)

    def take_damaged(self) -> list[DamagedRecord]:
        """The damage found by loads since the last call (recovery turns it into reservations)."""
        with self._lock:
            found, self.damaged = self.damaged, []
        return found

    def _record_of_line(self, line: bytes, path: Path, keep_spec: bool = True) -> ClaimRecord | object:
        """The record of one line (_STALE for another boot); without `keep_spec`, as memory keeps it (`_slim`),
        the spec text cut out before parsing where the line is laid out as written."""
        body = None if keep_spec else _body_without_spec(line)
        if body is None:
            body = _parse_signed(line, FORMAT_VERSION)
        elif body.get("version") != FORMAT_VERSION:
            raise CheckpointCorrupt(f"unknown format version {body.get('version')!r} (expected {FORMAT_VERSION})")
        if not isinstance(body.get("record"), dict):
            raise CheckpointCorrupt("missing 'record' object")
        if body.get("boot_id") != self.boot_id:
            return _STALE
        record = record_from_json(body["record"])
        if not keep_spec:
            record = _slim(record)
            record.spec_on_disk = record.spec_on_disk or bool(body.get(_SPEC_CUT))
        if path.name != _file_name(record.uid):
            raise CheckpointCorrupt(f"holds claim {record.uid!r}, whose file would be {_file_name(record.uid)!r}")
        return record

    # --- queries -------------------------------------------------------------

    def get(self, uid: str) -> ClaimRecord | None:
        with self._lock:
            return self._claims.get(uid)

    def records(self) -> list[ClaimRecord]:
        with self._lock:
            return list(self._claims.values())

    # --- changes (each persisted before returning) -----------------------------

    def put(self, record: ClaimRecord, durable: bool = True) -> None:
        """Store and write the record; `durable=False` skips the device flush even without a boot ID.

        A non-durable write is still atomic and visible to a restarted process
        (the page cache survives a process crash); only a power loss can undo
        it. Use it for intermediate states that a later durable write supersedes.
        """
        self.commit(self.stage(record), durable)

    def stage(self, record: ClaimRecord) -> ClaimRecord:
        """Store the record in memory only; returns the token to pass to commit().

        Lets a caller decide under its own lock (e.g. a device conflict check)
        and write outside it.
        """
        with self._lock:
            self._account(self._claims.get(record.uid), -1)
            self._claims[record.uid] = record
            self._account(record, 1)
        return record

    def commit(self, staged: ClaimRecord, durable: bool = True) -> None:
        """Return once the claim's file holds its current record (flushed to the device if durable
        and flushing matters, see `flush`)."""
        uid = staged.uid
        durable = durable and self.flush
        with self._lock:
            current = self._claims.get(uid)
            done = self._durable if durable else self._written
            if current is None or done.get(uid) is current:
                return
        self._write_record(current, durable)
        with self._lock:
            kept = _as_written(current)
            if kept is not current and self._claims.get(uid) is current:
                self._account(current, -1)
                self._claims[uid] = kept
                self._account(kept, 1)
            else:
                kept = current
            self._written[uid] = kept
            if durable:
                self._durable[uid] = kept

    def spec_text(self, uid: str) -> str | None:
        """The spec text the claim's record file holds (read now: memory keeps records without it), or None."""
        path = self.path / _file_name(uid)
        try:
            lines = [line for line in _read_regular_file(path).split(b"\n") if line]
            record = self._record_of_line(lines[-1], path) if lines else None
        except (OSError, CheckpointCorrupt) as exc:
            log.warning("cannot read the spec text of a checkpoint record", extra=fields(path=str(path), error=str(exc)))
            return None
        return record.spec_json if isinstance(record, ClaimRecord) else None

    def completed_device_count(self) -> int:
        """Devices of completed claims, kept up to date on every change (a metrics gauge reads it per call)."""
        with self._lock:
            return self._completed_devices

    def holders(self, pool: str, device: str) -> list[tuple[ClaimRecord, CheckpointDevice]]:
        """The claims (any phase) whose records name this device, each with its entry for it.

        An entry with an empty pool (rebuilt from backend records, which name devices but not
        pools; no real pool is empty) holds the device name in every pool.
        """
        with self._lock:
            found = list(self._holders.get((pool, device), {}).values())
            if pool:
                found += self._holders.get(("", device), {}).values()
            return found

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
        """Delete the record's file, then drop it (a stale file could only resurrect it until the next boot).

        Something that is not a file in its place (a directory) is moved aside; a file that
        cannot be deleted raises and the record stays: the reservation is kept.
        """
        path = self._record_path(uid)
        try:
            _unlink(path)
        except IsADirectoryError:
            _set_aside(path, "a directory in a record's place", "nothing was read from it")
        except OSError as exc:
            if exc.errno != errno.EPERM or not os.path.isdir(path):
                raise
            _set_aside(path, "a directory in a record's place", "nothing was read from it")
        self._drop(uid)

    def forget(self, uid: str) -> None:
        """Drop a staged record whose commit failed, and its file if one was written.

        If a file survives anyway, a restart rolls that half-prepared claim back,
        which is harmless because nothing was done for it yet.
        """
        self._drop(uid)
        try:
            _unlink(self._record_path(uid))
        except OSError as exc:
            log.warning("could not delete a failed claim's checkpoint record", extra=fields(uid=uid, error=str(exc)))

    def _drop(self, uid: str) -> None:
        with self._lock:
            record = self._claims.pop(uid, None)
            self._written.pop(uid, None)
            self._durable.pop(uid, None)
            if record is not None:
                self._account(record, -1)

    def _write_record(self, record: ClaimRecord, durable: bool) -> None:
        _append_file(self._record_path(record.uid), self._line(record), durable)

    def _record_path(self, uid: str) -> str:
        # A str, not a Path: a Path would intern the claim's file name (node_file.child_path).
        return node_file.child_path(self.path, _file_name(uid))

    def _line(self, record: ClaimRecord) -> bytes:
        """One signed line: canonical body (keys sorted: boot_id < record < version) and its SHA-256."""
        body = f'{{"boot_id":{json.dumps(self.boot_id)},"record":{canonical(record.to_json())},"version":{FORMAT_VERSION}}}'.encode()
        digest = hashlib.sha256(body).hexdigest().encode()
        return b'\n{"body":' + body + b',"checksum":"' + digest + b'"}\n'


_STALE = object()


_SPEC_KEY = b'"spec_json":"'
_RECORD_LAST_KEY = b',"uid":"'  # keys are sorted: the record's uid follows its spec_json
_SPEC_CUT = "_spec_cut"


def _body_without_spec(line: bytes) -> dict[str, Any] | None:
    """The body of a record line laid out as written (checksum verified on its bytes), parsed without the spec
    text (~6 KiB of a line's ~8, most of its parse time); the body notes `_SPEC_CUT` when it had one. None: check
    the line the full way (another layout, or damage).

    Keys are sorted, so the record's spec_json is its last key but uid and its string ends where the record's
    `,"uid":"` begins (the last one of the body). A quote inside a string is escaped, so neither byte pattern can come
    from a value; a key of the same name nested deeper (in backend_state) would make the cut span unbalanced
    braces, which no parser accepts: such a line is checked the full way.
    """
    body = body_as_written(line)
    if body is None:
        return None
    try:
        last = body.rfind(_RECORD_LAST_KEY)
        start = body.rfind(_SPEC_KEY, 0, last)
        if start > 0 and body[start - 1 : start] == b",":
            parsed = json.loads(body[: start - 1] + body[last:])  # from the comma before the key to the one after it
            parsed[_SPEC_CUT] = True
        else:
            parsed = json.loads(body)
    except ValueError:  # includes a cut that was not the record's spec text: see above
        return None
    return parsed if isinstance(parsed, dict) else None


def _slim(record: ClaimRecord) -> ClaimRecord:
    """The copy of a record read from its file that memory keeps: without the spec text, which stays in the file."""
    return record if record.spec_json is None else replace(record, spec_json=None, spec_on_disk=True)


def _as_written(record: ClaimRecord) -> ClaimRecord:
    """What memory keeps of a record just written: `_slim`, and a copy of a slim record (whose new line holds
    no spec text) no longer says its file holds one."""
    return replace(record, spec_on_disk=False) if record.spec_json is None and record.spec_on_disk else _slim(record)


def _file_name(uid: str) -> str:
    """`<uid>.json` for ordinary UIDs; anything that is not a safe file name goes by its hash."""
    return node_file.claim_file_stem(uid) + _RECORD_SUFFIX


def record_from_json(data: Any) -> ClaimRecord:
    try:
        return ClaimRecord.from_json(data)
    except (KeyError, TypeError, AttributeError) as exc:
        raise CheckpointCorrupt(f"malformed claim record: {exc}") from exc


def _parse_signed(raw: bytes, version: int) -> dict[str, Any]:
    """The checked body of a `{"body", "checksum"}` document of the given format version."""
    try:
        body = verified_body(raw)
    except SignedJsonError as exc:
        raise CheckpointCorrupt(str(exc)) from exc
    if body.get("version") != version:
        raise CheckpointCorrupt(f"unknown format version {body.get('version')!r} (expected {version})")
    return body


def _salvage_line(line: bytes, boot_id: str) -> ClaimRecord | None:
    """A damaged line's claim as far as it parses (checksum ignored); devices with the wrong types are dropped."""
    try:
        doc = json.loads(line)
        body = doc["body"]
        data = body["record"]
        if body.get("boot_id") != boot_id or not isinstance(data.get("uid"), str):
            return None
        devices = [
            CheckpointDevice(str(d.get("request", "")), d["pool"], d["device"], d.get("admin_access") is True,
                             d.get("share_id") if isinstance(d.get("share_id"), str) else None,
                             consumed=_string_map(d.get("consumed")))
            for d in data.get("devices") or []
            if isinstance(d, dict) and isinstance(d.get("pool"), str) and isinstance(d.get("device"), str)
        ]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    text = lambda key: data[key] if isinstance(data.get(key), str) else ""  # noqa: E731
    return ClaimRecord(data["uid"], text("namespace"), text("name"), PREPARE_COMPLETED, devices)


def _string_map(value: Any) -> dict[str, str]:
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(value, dict) else {}


def _uid_of_file_name(name: str) -> str | None:
    """The claim UID a record file name spells (None for hashed names: the UID is not recoverable)."""
    if not name.endswith(_RECORD_SUFFIX):
        return None
    stem = name[: -len(_RECORD_SUFFIX)]
    if _HASHED_NAME.fullmatch(stem) or not node_file.PLAIN_FILE_NAME.fullmatch(stem):
        return None
    return stem


def _read_regular_file(path: Path) -> bytes:
    """The bytes of `path` if it is a regular file of at most MAX_RECORD_FILE_BYTES; never follows a symlink in
    its place, never waits on a pipe."""
    try:
        return node_file.read_regular(path, MAX_RECORD_FILE_BYTES)
    except node_file.NodeFileError as exc:
        raise CheckpointCorrupt(f"{exc.problem} (in a record's place; never followed or read)") from exc


def _set_aside(path: Path | str, reason: object, consequence: str) -> Path | None:
    """Rename a damaged file (or directory, or symlink: the entry itself) out of the loader's way.

    Returns the new path, or None if it was gone or could not be moved (logged either way).
    """
    aside = Path(f"{os.fspath(path)}.corrupt-{time.time_ns()}")
    try:
        os.replace(path, aside)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.error(
            "checkpoint file %s is damaged (%s) and cannot be moved aside (%s)", path, reason, exc,
            extra=fields(path=str(path), reason=str(reason), error=str(exc)),
        )
        return None
    log.error(
        "checkpoint file %s is corrupt (%s); moved aside to %s: %s",
        path,
        reason,
        aside,
        consequence,
        extra=fields(path=str(path), moved_to=str(aside), reason=str(reason)),
    )
    return aside


def _unlink(path: Path | str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError as exc:
        log.warning("cannot remove a leftover temp file", extra=fields(path=str(path), error=str(exc)))


def _append_file(path: Path | str, data: bytes, durable: bool) -> None:
    """Append one line (created if missing); flushed to the device before returning when durable."""
    # Never through a symlink in the record's place: the write would land wherever it points.
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileNotFoundError:
        file_modes.make_dirs(Path(os.path.dirname(path)), file_modes.PRIVATE_DIR)
        fd = os.open(path, flags, 0o600)
    written = 0
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                written += n
                view = view[n:]
            if durable:
                atomic_file.datasync(fd)
        except BaseException:
            _undo_append(path, fd, written)
            raise
    finally:
        os.close(fd)


def _undo_append(path: Path | str, fd: int, written: int) -> None:
    """Best effort after a failed append: the line must not count (a file it created goes entirely).

    The claim's lock keeps other writers of this file away, so the size before
    the append is the current size less what this append wrote.
    """
    try:
        size = os.fstat(fd).st_size - written
        if size <= 0:
            os.unlink(path)
        else:
            os.ftruncate(fd, size)
    except OSError:
        pass  # a leftover line without a flush is at worst a record the next start rolls back


