"""Start-up recovery: damaged or lost state never frees a device.

A device in use is sacred, so every piece of evidence that a claim was prepared
keeps its devices reserved, and only evidence that a claim was *not* answered
(a checksummed PrepareStarted record) or that the kubelet asked to release it
(UnprepareStarted) lets recovery undo anything. Evidence, strongest first:

1. the claim's checkpoint record (checksummed; the checkpoint loads it);
2. its CDI spec and the claim file beside it, which holds the claim's record,
   checksummed (cdi.py): a record rebuilt from it is complete (devices, CDI
   IDs, backend state, the spec text itself); a spec without a usable claim
   file keeps the claim UID reserved until it is unprepared;
3. a damaged record the checkpoint set aside: an earlier line whose checksum
   holds, else the devices of the damaged line as far as it parses (these only
   ever add reservations; nothing read from a failed checksum is acted on);
4. the backend's own records (`VendorBackend.recorded_claims`, e.g. NVIDIA's
   MIG ownership journal), which name devices but not pools: such a
   reservation holds the device name in every pool.

A rebuilt record is written back as a normal PrepareCompleted record marked
`recovered`, so the reservation survives the next restart and the claim can be
unprepared completely. When it has no spec text (the spec is gone too) a later
prepare of that claim fails with an error saying so instead of answering CDI
IDs that do not resolve. Every finding is an error log line and a
`dra_driver_state_damage_total` count.

Recovery runs after the sockets serve (the kubelet can register the driver
while thousands of records are read), so every NodePrepareResources and
NodeUnprepareResources first passes the `RecoveryGate`: it waits there until
recovery knows every reservation, or answers each claim with an error the
kubelet retries when its deadline comes first. No device is handed out or
freed before then; a recovery that fails keeps the gate shut (every claim call
refused, saying why) rather than answer from a partial picture.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dra_driver.node import cdi
from dra_driver.node.checkpoint import (
    PREPARE_COMPLETED,
    UNPREPARE_STARTED,
    Checkpoint,
    CheckpointCorrupt,
    CheckpointDevice,
    ClaimRecord,
    DamagedRecord,
    Phase,
    record_from_json,
)
from dra_driver.common.logs import fields
from dra_driver.node.metrics import Metrics
from dra_driver.model.names import uid_problem
from dra_driver.backend.interface import RecordedClaim, VendorBackend

log = logging.getLogger(__name__)

CLAIM_FILE_FORMAT = 1  # version of the data in a claim file


def claim_file_data(boot_id: str, record: ClaimRecord) -> dict[str, Any]:
    """What a claim file holds: the claim's completed record (with its spec's text) and the boot it belongs to."""
    return {"boot_id": boot_id, "record": record.to_json(), "version": CLAIM_FILE_FORMAT}


@dataclass
class _Evidence:
    """What is known about one claim without a valid record."""

    uid: str
    sources: list[str] = field(default_factory=list)
    base: ClaimRecord | None = None  # the best record the evidence gives
    extra_devices: list[CheckpointDevice] = field(default_factory=list)  # from backend records: any pool
    salvaged: list[CheckpointDevice] = field(default_factory=list)  # from a line failing its checksum
    state: dict[str, Any] = field(default_factory=dict)
    spec_kept: bool = False  # a spec stays in place whose devices are unknown
    damaged: bool = False  # a damaged record was found for it


class RecoveryGate:
    """Claim calls wait here until start-up recovery has turned every record and piece of evidence into reservations."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._failure: str | None = None

    def open(self) -> None:
        self._done.set()

    def fail(self, reason: str) -> None:
        """Recovery did not finish: the gate stays shut for claims (every call refused with `reason`)."""
        self._failure = reason
        self._done.set()

    def wait(self, timeout: float) -> bool:
        """True once recovery ended (finished or failed), waiting at most `timeout` seconds."""
        return self._done.wait(timeout)

    def problem(self) -> str | None:
        """Why claim calls cannot be answered now (recovery running or failed), without waiting; None once they can."""
        if not self._done.is_set():
            return "start-up recovery is still reading the checkpoint (claim calls wait for it)"
        if self._failure is not None:
            return f"start-up recovery failed ({self._failure}): every claim call is refused until the driver restarts"
        return None

    def refusal(self, operation: str, deadline: float | None) -> str | None:
        """None once recovery is done (waiting for it, at most until `deadline`, time.monotonic()); else why
        the call must not run."""
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self._done.wait(timeout):
            return (
                f"{operation} not started: the driver is still reading its checkpoint after a restart and answers no claim "
                "before every reservation is known; the kubelet will retry"
            )
        if self._failure is not None:
            return (
                f"{operation} refused: start-up recovery failed ({self._failure}), so which devices are in use is not known; "
                "no device is handed out or freed until the driver is restarted and recovers"
            )
        return None


class SpecEvidence:
    """Reads one claim's spec and claim file as evidence."""

    def __init__(self, driver: str, boot_id: str, cdi_dir: Path) -> None:
        self.driver = driver
        self.boot_id = boot_id
        self.cdi_dir = cdi_dir

    def record(self, uid: str) -> tuple[ClaimRecord | None, str]:
        """(record rebuilt from the claim file, verdict): verdict is "ok", "gone" (neither file), "other-boot",
        "unreadable" (a spec that is no CDI spec, and no claim file) or "no-claim-data" (a spec, no usable claim file)."""
        spec = cdi.spec_path(self.cdi_dir, self.driver, uid)
        claim_file = cdi.claim_file_path(self.cdi_dir, self.driver, uid)
        record = self._from_claim_file(uid, claim_file)
        if record == "other-boot":
            return None, "other-boot"
        if isinstance(record, ClaimRecord):
            return replace(record, phase=PREPARE_COMPLETED, cdi_spec=str(spec)), "ok"
        try:
            cdi.parse_spec(cdi.read_spec_file(spec))
        except FileNotFoundError:
            return None, "gone"
        except cdi.SpecUnreadable:
            return None, "unreadable"
        except OSError as exc:
            log.error("CDI spec unreadable; left in place", extra=fields(path=str(spec), error=str(exc)))
        return None, "no-claim-data"

    def _from_claim_file(self, uid: str, path: Path | str) -> ClaimRecord | str | None:
        try:
            data = cdi.read_claim_file(path)
        except FileNotFoundError:
            return None
        except (OSError, cdi.SpecUnreadable) as exc:
            log.error("claim file unusable; set aside", extra=fields(path=str(path), reason=str(exc)))
            _set_aside(path)
            return None
        if data.get("boot_id") != self.boot_id:
            return "other-boot"
        try:
            record = record_from_json(data.get("record"))
        except CheckpointCorrupt as exc:
            log.error("claim file holds no usable record; set aside", extra=fields(path=str(path), reason=str(exc)))
            _set_aside(path)
            return None
        if record.uid != uid:
            log.error("claim file names another claim; set aside", extra=fields(path=str(path), recorded=record.uid))
            _set_aside(path)
            return None
        return record


class Recovery:
    """Turns the evidence on disk into reservations, then undoes what was abandoned."""

    def __init__(
        self,
        backend: VendorBackend,
        checkpoint: Checkpoint,
        cdi_dir: Path,
        try_claim: Callable[[str], AbstractContextManager[bool]],
        undo: Callable[[ClaimRecord], None],
        metrics: Metrics | None = None,
    ) -> None:
        self.backend = backend
        self.driver = backend.driver_name
        self._checkpoint = checkpoint
        self._cdi_dir = cdi_dir
        self._try_claim = try_claim
        self._undo = undo
        self._metrics = metrics
        self._specs = SpecEvidence(self.driver, checkpoint.boot_id, cdi_dir)

    def run(self) -> set[str]:
        """All of start-up recovery after the checkpoint was loaded; returns the UIDs another live
        instance is working on (left alone). The caller holds the checkpoint section."""
        self._remove_temp_files()
        self.rebuild(self._checkpoint.take_damaged(), self._backend_claims())
        return self._roll_back_abandoned()

    # --- evidence -> reservations -------------------------------------------------

    def rebuild(self, damaged: list[DamagedRecord], recorded: Iterable[RecordedClaim] = ()) -> None:
        """Give every claim with evidence but no valid record a rebuilt record (and reservation)."""
        evidence: dict[str, _Evidence] = {}
        for damage in damaged:
            self._count("checkpoint-dir" if damage.path == self._checkpoint.path else "record")
            if damage.uid is None:
                log.error(
                    "damaged checkpoint state names no claim; whatever it reserved is reserved only if a CDI spec or "
                    "backend record shows it", extra=fields(driver=self.driver, path=str(damage.path), reason=damage.reason),
                )
                continue
            self._add_damage(evidence.setdefault(damage.uid, _Evidence(damage.uid)), damage)
        for claim in recorded:
            self._add_backend(evidence.setdefault(claim.claim_uid, _Evidence(claim.claim_uid)), claim)
        on_disk = cdi.claims_on_disk(self._cdi_dir, self.driver)
        known = {r.uid for r in self._checkpoint.records()}
        for uid in sorted((set(evidence) | on_disk) - known):
            if uid_problem(uid) is not None:  # a file name no claim of ours can have: never a path of its own
                log.error("file in the CDI directory names no valid claim UID; left alone", extra=fields(driver=self.driver, uid=uid))
                continue
            with self._try_claim(uid) as free:
                if not free:  # another live instance works on it: its record is on the way
                    continue
                found = evidence.get(uid) or _Evidence(uid)
                if uid in on_disk:
                    self._add_spec(found)
                self._reserve(found)

    def rebuild_from_spec(self, uid: str) -> ClaimRecord | None:
        """The record a claim's spec and claim file prove (unprepare of a claim whose record vanished at run time)."""
        record, _verdict = self._specs.record(uid)
        return record

    def _add_damage(self, found: _Evidence, damage: DamagedRecord) -> None:
        found.damaged = True
        source = damage.last_good or damage.salvaged
        if source is None:
            return
        found.sources.append("damaged-record")
        if damage.last_good is not None:
            found.base = replace(damage.last_good, spec_json=None, spec_on_disk=False)  # its spec text may be older than the spec
            found.state = dict(damage.last_good.backend_state)
        else:
            found.salvaged += source.devices  # failed its checksum: reservations only
            found.base = found.base or replace(source, devices=[], backend_state={})

    def _add_backend(self, found: _Evidence, claim: RecordedClaim) -> None:
        found.sources.append("backend-records")
        found.extra_devices += [CheckpointDevice("", "", name) for name in claim.devices]  # pool unknown: any pool
        for key, value in claim.state.items():
            found.state.setdefault(key, value)

    def _add_spec(self, found: _Evidence) -> None:
        record, verdict = self._specs.record(found.uid)
        path = cdi.spec_path(self._cdi_dir, self.driver, found.uid)
        if record is not None:
            found.sources.insert(0, "cdi-spec")
            state = {**found.state, **record.backend_state}
            # The spec's checksummed record is complete: what a damaged line seemed to say adds nothing.
            found.base, found.state, found.salvaged = record, state, []
        elif verdict == "other-boot":
            log.warning("removing CDI spec of another boot", extra=fields(driver=self.driver, path=str(path)))
            try:
                cdi.remove_spec(path)
                cdi.remove_spec(cdi.claim_file_path(self._cdi_dir, self.driver, found.uid))
            except OSError as exc:
                log.error("cannot remove a CDI spec of another boot", extra=fields(driver=self.driver, path=str(path), error=str(exc)))
        elif verdict == "unreadable":
            self._count("cdi-spec")
            _set_aside(path)
        elif verdict == "no-claim-data":
            self._count("cdi-spec")
            found.spec_kept = True

    def _reserve(self, found: _Evidence) -> None:
        if not found.sources and not found.spec_kept:
            if found.damaged:
                self._log_forgotten(found.uid)
            return
        base = found.base or ClaimRecord(found.uid, "", "", PREPARE_COMPLETED)
        named = {(d.pool, d.device) for d in base.devices}
        named_any_pool = {d.device for d in base.devices}
        extra = [
            d for d in found.salvaged + found.extra_devices
            if (d.pool, d.device) not in named and not (d.pool == "" and d.device in named_any_pool)
        ]
        # A trusted line saying the kubelet asked to unprepare: finish that; anything else stays prepared.
        phase: Phase = UNPREPARE_STARTED if base.phase == UNPREPARE_STARTED else PREPARE_COMPLETED
        sources = found.sources or ["cdi-spec-without-claim-data"]
        record = replace(
            base, phase=phase, devices=base.devices + _unique(extra), backend_state=found.state, recovered="+".join(sources),
        )
        try:
            self._checkpoint.put(record)
        except OSError as exc:  # cannot write: still reserved in memory for as long as this process lives
            self._checkpoint.stage(record)
            log.error(
                "cannot write a rebuilt checkpoint record; reserved in memory only", extra=fields(driver=self.driver, uid=record.uid, error=str(exc))
            )
        self._count("rebuilt")
        log.error(
            "claim state was lost or damaged; rebuilt from evidence, its devices stay reserved",
            extra=fields(
                driver=self.driver,
                uid=record.uid,
                claim=f"{record.namespace}/{record.name}",
                source=record.recovered,
                devices=[f"{d.pool or '*'}/{d.device}" for d in record.devices],
                answerable=record.answerable,
            ),
        )

    def _log_forgotten(self, uid: str) -> None:
        log.error(
            "damaged checkpoint record of a claim with no CDI spec and no backend record: nothing tells which devices it held, so none stay reserved",
            extra=fields(driver=self.driver, uid=uid),
        )

    def _backend_claims(self) -> list[RecordedClaim]:
        try:
            return self.backend.recorded_claims()
        except Exception as exc:  # evidence is best effort; a broken reader must not stop the driver
            log.error("cannot read the backend's claim records", extra=fields(driver=self.driver, error=f"{type(exc).__name__}: {exc}"))
            return []

    # --- leftovers and abandoned claims ----------------------------------------------

    def _remove_temp_files(self) -> None:
        """Temp files of spec writes a kill -9 interrupted (runtimes list the directory; never a spec)."""
        for uid, path in cdi.leftover_temp_files(self._cdi_dir, self.driver):
            with self._try_claim(uid) as free:
                if not free:  # another instance is writing that claim's spec right now
                    continue
                try:
                    path.unlink()
                    log.info("removed a leftover temp file from the CDI directory", extra=fields(driver=self.driver, path=str(path)))
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    log.warning("cannot remove a leftover temp file", extra=fields(driver=self.driver, path=str(path), error=str(exc)))

    def _roll_back_abandoned(self) -> set[str]:
        """Undo half-prepared and half-unprepared claims nobody works on; return the UIDs a live instance holds."""
        in_flight: set[str] = set()
        for record in self._checkpoint.records():
            if record.completed:
                continue
            with self._try_claim(record.uid) as free:
                if not free:
                    in_flight.add(record.uid)
                    continue
                action = "finishing interrupted unprepare" if record.phase == UNPREPARE_STARTED else "rolling back half-prepared claim"
                log.warning(action, extra=fields(driver=self.driver, claim=f"{record.namespace}/{record.name}", uid=record.uid))
                try:
                    self._undo(record)
                except Exception as exc:  # keep the record: its devices stay reserved, the next unprepare retries
                    self._count("rollback-failed")
                    log.error(
                        "rollback failed; the claim's devices stay reserved",
                        extra=fields(driver=self.driver, uid=record.uid, error=str(exc)),
                    )
        return in_flight

    def _count(self, kind: str) -> None:
        if self._metrics is not None:
            self._metrics.state_damage.labels(self.driver, kind).inc()


def _unique(devices: list[CheckpointDevice]) -> list[CheckpointDevice]:
    seen: set[tuple[str, str]] = set()
    out = []
    for dev in devices:
        if (dev.pool, dev.device) not in seen:
            seen.add((dev.pool, dev.device))
            out.append(dev)
    return out


def _set_aside(path: Path | str) -> None:
    """A spec that is no CDI spec, or a damaged claim file: renamed to a dot-name without .json/.yaml, so runtimes
    and recovery skip it and a human can still look."""
    head, name = os.path.split(path)
    aside = os.path.join(head, f".{name.lstrip('.')}.corrupt")
    try:
        os.replace(path, aside)
    except OSError as exc:
        log.error("cannot move an unusable file in the CDI directory aside", extra=fields(path=str(path), error=str(exc)))
        return
    log.error("file in the CDI directory is unusable; moved aside", extra=fields(path=str(path), moved_to=str(aside)))
