"""Prepare and unprepare claims for one driver (one backend).

Guarantees (kubelet DRA manager behaviour, docs/sources.md):
- one outcome per requested claim UID; a failing claim carries its own error
  and never fails the others or the call;
- idempotent: a completed claim is answered again from the checkpoint without
  touching the API server or the backend; unprepare of an unknown claim is a
  success, and unprepare needs only the checkpoint (the claim may be gone);
- different claims run in parallel, the same claim UID is serialized, and a
  device held by one claim is refused to another unless the allocation shares
  it (adminAccess, or a consumable-capacity shareID on both);
- rolling updates (several driver instances on one node, `--pod-uid`): each
  claim operation holds that claim's lock file for its whole run, and the
  shared `serialize.lock` only around checkpoint sections (re-read, conflict
  check, record writes), so an instance can unprepare what another prepared
  while claims of different UIDs still run in parallel across instances. A
  starting instance recovers under the shared lock and never rolls back a
  claim whose lock file another live instance holds;
- no claim call runs before start-up recovery knows every reservation: it runs
  after the sockets serve (`start_recovery`) and calls wait for it
  (recovery.RecoveryGate), answering an error the kubelet retries if their
  deadline comes first.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from dra_driver.node import cdi
from dra_driver.node.checkpoint import PREPARE_COMPLETED, PREPARE_STARTED, UNPREPARE_STARTED, Checkpoint, CheckpointDevice, ClaimRecord
from dra_driver.common.errors import DraError
from dra_driver.common.logs import fields
from dra_driver.model import quantity
from dra_driver.model.device import Inventory
from dra_driver.node.metrics import HeldClaim, Metrics
from dra_driver.node.plugin.claim_checks import ClaimError, bounded, check_ref, check_results, error_limit, our_results
from dra_driver.node.plugin.config import base_request, resolve_configs
from dra_driver.node.plugin.locks import ClaimFileLocks, KeyedLocks, SharedSection
from dra_driver.node.plugin.recovery import Recovery, RecoveryGate, claim_file_data
from dra_driver.node.plugin.storage_errors import Place, StorageError, in_place
from dra_driver.backend.interface import AllocatedDevice, BackendSettings, ClaimRef, ContainerEdits, PreparedClaim, VendorBackend

if TYPE_CHECKING:  # the claim models are built with the API client, after the sockets serve (dra_driver.node.daemon)
    from dra_driver.model.resource_v1 import ResourceClaim

log = logging.getLogger(__name__)

# Test hook (crash tests only): when set to a directory, a claim operation stops at
# one named point, creates <dir>/<claimUID> and waits while that file exists. The
# point is the content of <dir>/<claimUID>.point if that file exists, else after-cdi
# (see HOLD_POINTS). Unset (production), the hook is one attribute test per point.
HOLD_ENV = "DRA_DRIVER_TEST_HOLD_PREPARE"
HOLD_POINTS = (
    "after-started",  # PrepareStarted is durable, the backend has not been called
    "after-backend",  # the backend prepared and its state is recorded (if needed: see undoes_from_own_records), no CDI spec yet
    "after-cdi",  # the CDI spec is written, PrepareCompleted is not recorded
    "after-completed",  # PrepareCompleted is recorded, the answer is not sent
    "during-unprepare",  # the backend unprepared, the spec and the record are still there
    "after-spec-removed",  # unprepare removed the spec, the (UnprepareStarted) record is still there
    "during-recovery",  # start-up recovery loaded the records, nothing rebuilt or rolled back yet (UID "recovery")
)
RECOVERY_HOLD = "recovery"  # the name start-up recovery holds under (in place of a claim UID)

# Why these devices (names in this driver's pool) must not be prepared now, or None (node_checks.coexistence:
# a device plugin on the node hands them out).
DeviceCheck = Callable[[Sequence[str]], "str | None"]


class ClaimSource(Protocol):
    # uid lets a cache answer safely; deadline (time.monotonic()) bounds the lookup, retries included
    def get(self, namespace: str, name: str, uid: str = "", deadline: float | None = None) -> ResourceClaim: ...


@dataclass
class PrepareOutcome:
    devices: list[CheckpointDevice] = field(default_factory=list)
    error: str = ""


class PrepareService:
    def __init__(
        self,
        backend: VendorBackend,
        claims: ClaimSource,
        checkpoint: Checkpoint,
        cdi_dir: Path,
        metrics: Metrics | None = None,
        workers: int = 8,
        shared_lock: Path | None = None,
        claim_locks: Path | None = None,
        pools: Collection[str] | None = None,
        device_nodes: Callable[[dict[str, Any]], None] | None = None,
        device_check: DeviceCheck | None = None,
    ) -> None:
        self.backend = backend
        self._device_check = device_check
        self._shared_capacity: dict[str, dict[str, Decimal]] = {}  # device -> consumable capacity (use_inventory)
        self.driver = backend.driver_name
        # The pools this driver publishes on this node (default: the node name, as the publisher does);
        # a result naming any other pool is that claim's error.
        self._pools = frozenset(pools) if pools is not None else frozenset({_node_name(backend)})
        self._claims = claims
        self._checkpoint = checkpoint
        self._cdi_dir = cdi_dir
        # Where a disk failure happened, for the claim's error (storage_errors).
        self._cdi_place = Place("CDI directory", cdi_dir, "--cdi-dir")
        self._state_place = Place("state directory", checkpoint.path, "--state-dir")
        self._metrics = metrics
        if metrics is not None:  # series from the start: a node without failures reads 0, not "no data"
            for operation in ("prepare", "unprepare"):
                metrics.errors.labels(self.driver, operation)
                for result in ("ok", "error"):
                    metrics.claims.labels(self.driver, operation, result)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"prepare-{self.driver}")
        self._uid_locks = KeyedLocks()
        self._devices_lock = KeyedLocks()  # one key: conflict check + PrepareStarted are atomic
        self._section = SharedSection(shared_lock, self._reload) if shared_lock is not None else None
        locks_dir = claim_locks or (shared_lock.parent / "claims" if shared_lock is not None else None)
        self._claim_files = ClaimFileLocks(locks_dir) if locks_dir is not None else None
        self._recovery = Recovery(backend, checkpoint, cdi_dir, self._try_claim, lambda r: self._undo(r, section_held=True), metrics)
        # Set by start_recovery (recovery after the sockets serve); a caller that runs `recover` itself first needs none.
        self._gate: RecoveryGate | None = None
        self._recovery_thread: threading.Thread | None = None
        self._hold_dir = os.environ.get(HOLD_ENV)
        # Simulated node in a real cluster (dra_driver.simulation.node): makes the host device nodes a spec names before it is written.
        self._device_nodes = device_nodes

    def close(self) -> None:
        if self._recovery_thread is not None:  # it writes records: done before the caller lets another instance in
            self._recovery_thread.join()
            self._recovery_thread = None
        self._pool.shutdown(wait=True)
        if self._section is not None:
            self._section.close()

    # --- batch entry points ---------------------------------------------------

    def prepare(self, claims: Sequence[ClaimRef], deadline: float | None = None) -> dict[str, PrepareOutcome]:
        """`deadline` (time.monotonic()): when the answer must be ready; a claim not done by then gets an error."""
        return self._batch(claims, functools.partial(self._prepare_guarded, deadline=deadline), "prepare", deadline)

    def unprepare(self, claims: Sequence[ClaimRef], deadline: float | None = None) -> dict[str, str]:
        outcomes = self._batch(claims, functools.partial(self._unprepare_guarded, deadline=deadline), "unprepare", deadline)
        return {uid: outcome.error for uid, outcome in outcomes.items()}

    def _batch(
        self, claims: Sequence[ClaimRef], one: Callable[[ClaimRef], PrepareOutcome], operation: str, deadline: float | None
    ) -> dict[str, PrepareOutcome]:
        unique = list({claim.uid: claim for claim in claims}.values())
        refusal = self._gate.refusal(operation, deadline) if self._gate is not None else None
        if refusal is not None:
            log.warning(
                "claim call not run before start-up recovery finished", extra=fields(driver=self.driver, operation=operation, claims=len(unique))
            )
            return {claim.uid: PrepareOutcome(error=refusal) for claim in unique}
        if len(unique) <= 1:  # the common case: no thread hop
            outcomes = {claim.uid: one(claim) for claim in unique}
        else:
            futures = {claim.uid: self._pool.submit(one, claim) for claim in unique}
            outcomes = _collect(futures, deadline, operation)
        _bound_errors(outcomes)
        if self._metrics is not None:
            for outcome in outcomes.values():
                self._metrics.claims.labels(self.driver, operation, "error" if outcome.error else "ok").inc()
                if outcome.error:
                    self._metrics.errors.labels(self.driver, operation).inc()
            self._metrics.prepared_devices.labels(self.driver).set(self.prepared_device_count())
            for uid in outcomes:
                self._metrics.holders.update(self.driver, uid, _held(self._checkpoint.get(uid)))
        return outcomes

    def checkpoint_record(self, uid: str) -> ClaimRecord | None:
        return self._checkpoint.get(uid)

    @property
    def checkpoint_reloads(self) -> int:
        """How often the checkpoint was re-read because another instance held the shared lock (rolling-update mode)."""
        return self._section.reloads if self._section is not None else 0

    def prepared_device_count(self) -> int:
        return self._checkpoint.completed_device_count()

    def _prepare_guarded(self, claim: ClaimRef, deadline: float | None = None) -> PrepareOutcome:
        try:
            check_ref(claim)
            with self._claim_lock(claim.uid):
                _check_time_left(deadline, "prepare")
                return PrepareOutcome(devices=self._prepare_one(claim, deadline))
        except DraError as exc:
            log.warning("prepare failed", extra=fields(driver=self.driver, **_logged(claim), error=bounded(str(exc))))
            return PrepareOutcome(error=bounded(str(exc)))
        except Exception as exc:  # a bug or backend crash fails this claim only
            log.exception("prepare failed unexpectedly", extra=fields(driver=self.driver, **_logged(claim)))
            return PrepareOutcome(error=bounded(f"internal error preparing claim {_name(claim)}: {type(exc).__name__}: {exc}"))

    def _unprepare_guarded(self, claim: ClaimRef, deadline: float | None = None) -> PrepareOutcome:
        try:
            check_ref(claim)  # before the UID reaches a lock file, a record or a CDI spec path
            with self._claim_lock(claim.uid):
                _check_time_left(deadline, "unprepare")
                self._unprepare_one(claim)
                return PrepareOutcome()
        except DraError as exc:
            log.warning("unprepare failed", extra=fields(driver=self.driver, **_logged(claim), error=bounded(str(exc))))
            return PrepareOutcome(error=bounded(str(exc)))
        except Exception as exc:
            log.exception("unprepare failed unexpectedly", extra=fields(driver=self.driver, **_logged(claim)))
            return PrepareOutcome(error=bounded(f"internal error unpreparing claim {_name(claim)}: {type(exc).__name__}: {exc}"))

    def _claim_lock(self, uid: str) -> ExitStack:
        """The claim's in-process lock, plus (rolling-update mode) its lock file across instances."""
        stack = ExitStack()
        stack.enter_context(self._uid_locks.hold(uid))
        if self._claim_files is not None:
            # The file goes once the claim has no record left, so lock files do not pile up.
            stack.enter_context(self._claim_files.hold(uid, drop_when=lambda: self._checkpoint.get(uid) is None))
        return stack

    def _checkpoint_section(self) -> AbstractContextManager[None]:
        """Rolling-update mode: the shared lock, the checkpoint re-read if another instance changed it;
        single instance: nothing needed."""
        if self._section is None:
            return nullcontext()
        return self._section.hold()

    # --- prepare --------------------------------------------------------------

    def _prepare_one(self, ref: ClaimRef, deadline: float | None = None) -> list[CheckpointDevice]:
        with self._checkpoint_section():
            record = self._checkpoint.get(ref.uid)
        if record is not None:
            _check_identity(ref, record, "prepare")
        if record is not None and record.completed:
            return self._answer_again(ref, record)
        if record is not None:  # an earlier attempt failed half-way, or an unprepare was interrupted
            self._undo(record)
        claim = self._claims.get(ref.namespace, ref.name, ref.uid, deadline=deadline)
        if self._metrics is not None:
            self._metrics.holders.note_pods(self.driver, ref.uid, claim.reserved_pods)
        allocated = self._our_devices(ref, claim)
        if not allocated:
            return []
        self._refuse_foreign_held(ref, allocated)
        devices = [CheckpointDevice(d.request, d.pool, d.device, d.admin_access, d.share_id, consumed=dict(d.consumed_capacity)) for d in allocated]
        started = ClaimRecord(ref.uid, ref.namespace, ref.name, PREPARE_STARTED, devices)
        with self._devices_lock.hold("devices"), self._checkpoint_section():
            self._check_conflicts(ref, allocated)
            staged = self._checkpoint.stage(started)  # reserves the devices for the next check
            if self._section is not None:  # other instances must see it before they check
                self._commit_started(ref, staged)
        if self._section is None:
            # Durable before the backend acts; written outside the devices lock so that
            # concurrent claims do not queue behind each other's flush.
            self._commit_started(ref, staged)
        try:
            self._hold_for_tests(ref.uid, "after-started")
            prepared = self.backend.prepare(ref, allocated)
            started = replace(started, backend_state=dict(prepared.state))
            if any(prepared.state.values()) and not self.backend.undoes_from_own_records:
                # Recorded before anything else so a crash from here on is undone with the real state.
                # Skipped when it adds nothing a rollback needs: a state with only empty values (nothing was
                # created: whole GPUs), or a backend whose own records undo the claim from an empty state.
                with self._checkpoint_section(), in_place(self._state_place, f"recording the prepare of ResourceClaim {_name(ref)}"):
                    self._checkpoint.put(started, durable=False)
            self._hold_for_tests(ref.uid, "after-backend")
            with in_place(self._cdi_place, f"writing the CDI spec of ResourceClaim {_name(ref)}"):
                completed = self._write_cdi(ref, started, prepared)
            self._hold_for_tests(ref.uid, "after-cdi")
            with self._checkpoint_section(), in_place(self._state_place, f"recording the prepare of ResourceClaim {_name(ref)}"):
                self._checkpoint.put(completed)
        except BaseException as exc:
            rolled_back = self._roll_back(started)
            if isinstance(exc, StorageError):  # say what became of the claim, too
                outcome = (
                    "the claim was rolled back"
                    if rolled_back
                    else "rolling it back failed too: its devices stay reserved until it is prepared or unprepared again"
                )
                raise StorageError(f"{exc}; {outcome}", exc.errno) from exc
            raise
        self._hold_for_tests(ref.uid, "after-completed")
        log.info("claim prepared", extra=fields(driver=self.driver, claim=_name(ref), uid=ref.uid, devices=len(devices)))
        return completed.devices

    def _answer_again(self, ref: ClaimRef, record: ClaimRecord) -> list[CheckpointDevice]:
        """A completed claim's devices again, but only once its spec is on disk and names every CDI ID answered.

        A spec that went missing (or no longer names those IDs) is rewritten from the text the record
        kept; a record without that text (rebuilt from evidence after its spec was lost) fails clearly.
        """
        path = cdi.spec_path(self._cdi_dir, self.driver, ref.uid)
        if not record.devices:  # rebuilt from a spec without claim data: which devices it holds is unknown
            raise ClaimError(
                f"ResourceClaim {_name(ref)}: its checkpoint record was lost and its CDI spec {path} does not say which "
                "devices it holds; delete the pods using the claim so the kubelet unprepares it, then it can be prepared again"
            )
        wanted = {i.partition("=")[2] for d in record.devices for i in d.cdi_ids}
        try:
            missing = wanted - cdi.device_names(cdi.parse_spec(cdi.read_spec_file(path)))
        except (OSError, cdi.SpecUnreadable) as exc:
            missing, problem = wanted or {"(spec)"}, str(exc)
        else:
            problem = f"it does not define {', '.join(sorted(missing))}"
        if not missing:
            return record.devices
        text = record.spec_json if record.spec_json is not None else self._checkpoint.spec_text(ref.uid) if record.spec_on_disk else None
        if text is None:
            raise ClaimError(
                f"ResourceClaim {_name(ref)} is prepared on this node but its CDI spec {path} is unusable ({problem}) and its "
                f"checkpoint record {'was rebuilt from ' + record.recovered if record.recovered else 'has no copy of it'}; "
                "its devices stay reserved: delete the pods using the claim so the kubelet unprepares it, then it can be prepared again"
            )
        log.error(
            "CDI spec of a prepared claim was missing or damaged; rewritten from the checkpoint",
            extra=fields(driver=self.driver, claim=_name(ref), uid=ref.uid, path=str(path), problem=problem),
        )
        if self._device_nodes is not None:
            self._device_nodes(cdi.parse_spec(text))
        with in_place(self._cdi_place, f"rewriting the lost CDI spec of ResourceClaim {_name(ref)}"):
            cdi.write_text_atomic(path, text)
        return record.devices

    def _roll_back(self, record: ClaimRecord) -> bool:
        """Undo a prepare that failed; if that fails too, keep the record (the devices stay reserved) and say False."""
        try:
            self._undo(record)
            return True
        except Exception as exc:
            if self._metrics is not None:
                self._metrics.state_damage.labels(self.driver, "rollback-failed").inc()
            log.error(
                "rollback of a failed prepare failed; the claim's devices stay reserved until it is unprepared or prepared again",
                extra=fields(driver=self.driver, claim=f"{record.namespace}/{record.name}", uid=record.uid, error=f"{type(exc).__name__}: {exc}"),
            )
            return False

    def _commit_started(self, ref: ClaimRef, staged: ClaimRecord) -> None:
        try:
            with in_place(self._state_place, f"recording the prepare of ResourceClaim {_name(ref)}"):
                self._checkpoint.commit(staged)
        except BaseException:
            self._checkpoint.forget(ref.uid)
            raise

    def _our_devices(self, ref: ClaimRef, claim: ResourceClaim) -> list[AllocatedDevice]:
        where = f"ResourceClaim {_name(ref)}"
        if claim.metadata.uid != ref.uid:
            raise ClaimError(
                f"{where} has UID {claim.metadata.uid}, the kubelet asked for {ref.uid}: the claim was deleted and re-created; the kubelet will "
                "retry with the new claim"
            )
        allocation = claim.allocation
        if allocation is None or allocation.devices is None:
            raise ClaimError(f"{where} is not allocated (status.allocation is empty); it must be allocated by the scheduler before the pod starts")
        ours = our_results(allocation.devices.results, self.driver)
        check_results(where, ours, self._pools)
        results = [item.result for item in ours]
        try:
            configs = resolve_configs(self.driver, allocation.devices.config, results, self.backend.validate_config)
        except DraError as exc:
            raise ClaimError(f"{where}: {exc}") from exc
        return [
            AllocatedDevice(
                request=base_request(r.request),
                pool=r.pool,
                device=r.device,
                admin_access=bool(r.admin_access),
                share_id=r.share_id,
                consumed_capacity=tuple(sorted((r.consumed_capacity or {}).items())),
                config=config,
            )
            for r, config in zip(results, configs)
        ]

    def _refuse_foreign_held(self, ref: ClaimRef, allocated: Sequence[AllocatedDevice]) -> None:
        """A device that a device plugin on this node hands out (or a device-plugin pod holds) is never prepared."""
        if self._device_check is None:
            return
        problem = self._device_check([dev.device for dev in allocated])
        if problem is not None:
            raise ClaimError(f"ResourceClaim {_name(ref)}: {problem}")

    def use_inventory(self, inventory: Inventory) -> None:
        """The consumable capacities of the devices several claims may share (what their shares add up to at most)."""
        self._shared_capacity = {
            d.name: {name: quantity.parse(d.capacity[name]) for name in d.capacity_policies if name in d.capacity}
            for d in inventory.devices
            if d.allow_multiple_allocations
        }

    def _check_conflicts(self, ref: ClaimRef, allocated: Sequence[AllocatedDevice]) -> None:
        self._check_capacity(ref, allocated)
        for dev in allocated:
            if dev.admin_access:  # adminAccess shares with anyone: no need to look at the holders
                continue
            for record, held_dev in self._checkpoint.holders(dev.pool, dev.device):
                if record.uid == ref.uid or held_dev.admin_access or (dev.share_id and held_dev.share_id and dev.share_id != held_dev.share_id):
                    continue
                raise ClaimError(
                    f"device {dev.pool}/{dev.device} of ResourceClaim {_name(ref)} is already prepared for claim "
                    f"{record.namespace}/{record.name} (uid {record.uid}); it can be shared only with adminAccess or consumable-capacity shares"
                )

    def _check_capacity(self, ref: ClaimRef, allocated: Sequence[AllocatedDevice]) -> None:
        """The shares on a device, of this claim and of every claim prepared (or being prepared) here, never add
        up to more than the device's capacity: the scheduler would not allocate that, and the node does not trust
        that it did (the same rule as a device given twice). Called under the devices lock."""
        shares: dict[tuple[str, str], list[AllocatedDevice]] = {}
        for dev in allocated:
            if dev.share_id is not None and not dev.admin_access and dev.device in self._shared_capacity:
                shares.setdefault((dev.pool, dev.device), []).append(dev)
        for (pool, device), mine in shares.items():
            capacity = self._shared_capacity[device]
            taken = dict.fromkeys(capacity, Decimal(0))
            held = [h.consumed for record, h in self._checkpoint.holders(pool, device) if record.uid != ref.uid and h.share_id and not h.admin_access]
            for consumed in held:
                for name, amount in consumed.items():
                    if name in taken and quantity.is_quantity(amount):
                        taken[name] += quantity.parse(amount)
            for dev in mine:
                for name, amount in dev.consumed_capacity:
                    if name not in taken:
                        continue
                    if not quantity.is_quantity(amount):
                        raise ClaimError(
                            f"ResourceClaim {_name(ref)}: device {pool}/{device} consumedCapacity {name} {amount!r} is not a quantity; the "
                            "allocation is damaged, allocate the claim again"
                        )
                    taken[name] += quantity.parse(amount)
            for name, total in taken.items():
                if total > capacity[name]:
                    raise ClaimError(
                        f"ResourceClaim {_name(ref)}: device {pool}/{device} would have {_amount(total)} of its {name} "
                        f"consumed by {len(held) + len(mine)} shares, more than its capacity {_amount(capacity[name])}; "
                        "a device's shares cannot add up to more than it has: deallocate the claim so the scheduler places it again"
                    )

    def _write_cdi(self, ref: ClaimRef, record: ClaimRecord, prepared: PreparedClaim) -> ClaimRecord:
        """One spec per claim: a CDI device per distinct (pool, device, share), plus one per request
        with set-wide edits whose ID is added to that request's devices."""
        edits_by_device: dict[str, list[ContainerEdits]] = {}
        for dev in prepared.devices:
            edits_by_device.setdefault(dev.device, []).append(dev.edits)
        spec_devices: list[cdi.SpecDevice] = []
        ids_by_key: dict[tuple[str, str, str | None], str] = {}
        for held in record.devices:
            key = (held.pool, held.device, held.share_id)
            if key in ids_by_key:  # the same device in two results (adminAccess in two requests)
                continue
            queue = edits_by_device.get(held.device) or [ContainerEdits()]
            edits = queue.pop(0) if len(queue) > 1 else queue[0]
            name = cdi.cdi_device_name(ref.uid, held.pool, held.device, held.share_id)
            spec_devices.append(cdi.SpecDevice(name=name, device=held.device, edits=edits))
            ids_by_key[key] = cdi.qualified_id(self.driver, name)
        request_ids: dict[str, str] = {}
        requests = {dev.request for dev in record.devices}
        for request, edits in sorted(prepared.request_edits.items()):
            if request not in requests or edits.is_empty():
                continue
            name = cdi.request_device_name(ref.uid, request)
            spec_devices.append(cdi.SpecDevice(name=name, device=request, edits=edits))
            request_ids[request] = cdi.qualified_id(self.driver, name)
        devices = [
            replace(
                dev, cdi_ids=[ids_by_key[(dev.pool, dev.device, dev.share_id)]] + ([request_ids[dev.request]] if dev.request in request_ids else [])
            )
            for dev in record.devices
        ]
        path = cdi.spec_path(self._cdi_dir, self.driver, ref.uid)
        spec = cdi.build_claim_spec(self.driver, spec_devices, prepared.claim_edits)
        if self._device_nodes is not None:
            self._device_nodes(spec)
        text = cdi.write_spec_atomic(path, spec)
        completed = replace(record, phase=PREPARE_COMPLETED, devices=devices, cdi_spec=str(path), spec_json=text)
        # Beside the spec, so a lost or damaged record can be rebuilt from it (recovery.py).
        cdi.write_claim_file(cdi.claim_file_path(self._cdi_dir, self.driver, ref.uid), claim_file_data(self._checkpoint.boot_id, completed))
        return completed

    def _hold_for_tests(self, uid: str, point: str) -> None:
        if not self._hold_dir:
            return
        wanted = Path(self._hold_dir) / f"{uid}.point"
        if (wanted.read_text().strip() if wanted.exists() else "after-cdi") != point:
            return
        marker = Path(self._hold_dir) / uid
        marker.touch()
        while marker.exists():
            time.sleep(0.01)

    # --- unprepare and rollback -----------------------------------------------

    def _unprepare_one(self, ref: ClaimRef) -> None:
        with self._checkpoint_section():
            record = self._checkpoint.get(ref.uid)
            if record is None:
                # Unknown claim: success. A spec left for it is evidence of a record lost at run time:
                # undo what it proves (backend state included), not just the file.
                record = self._recovery.rebuild_from_spec(ref.uid)
                if record is not None:
                    log.error(
                        "unprepare of a claim whose record is gone; undoing what its CDI spec records",
                        extra=fields(driver=self.driver, claim=_name(ref), uid=ref.uid),
                    )
            if record is not None:
                _check_identity(ref, record, "unprepare")
            if record is not None and record.completed:
                # From here on a crash finishes this unprepare instead of answering from a record whose
                # backend state or spec may already be gone.
                record = replace(record, phase=UNPREPARE_STARTED)
                with in_place(self._state_place, f"recording the unprepare of ResourceClaim {_name(ref)}"):
                    self._checkpoint.put(record, durable=False)
        if record is None:  # nothing readable: just the files
            with in_place(self._cdi_place, f"removing the CDI spec of ResourceClaim {_name(ref)}"):
                cdi.remove_spec(cdi.spec_path(self._cdi_dir, self.driver, ref.uid))
                cdi.remove_spec(cdi.claim_file_path(self._cdi_dir, self.driver, ref.uid))
            return
        self._undo(record)
        log.info("claim unprepared", extra=fields(driver=self.driver, claim=_name(ref), uid=ref.uid))

    def _undo(self, record: ClaimRecord, section_held: bool = False) -> None:
        """Release everything a (possibly partial) preparation holds; the record goes last.

        Backend first, then the spec, then the record: any step failing raises and keeps the
        record, so the devices stay reserved until a retry gets through. The caller holds the
        claim's lock; `section_held` says it also holds the checkpoint section.
        """
        ref = ClaimRef(record.namespace, record.name, record.uid)
        try:
            self.backend.unprepare(ref, record.backend_state)
        except DraError as exc:
            raise ClaimError(f"unprepare of ResourceClaim {_name(ref)} failed in the {self.backend.vendor} backend: {exc}") from exc
        self._hold_for_tests(record.uid, "during-unprepare")
        with in_place(self._cdi_place, f"removing the CDI spec of ResourceClaim {_name(ref)}"):
            cdi.remove_spec(cdi.spec_path(self._cdi_dir, self.driver, record.uid))
            cdi.remove_spec(cdi.claim_file_path(self._cdi_dir, self.driver, record.uid))  # after the spec: evidence to the last
        self._hold_for_tests(record.uid, "after-spec-removed")
        with (
            nullcontext() if section_held else self._checkpoint_section(),
            in_place(self._state_place, f"removing the record of ResourceClaim {_name(ref)}"),
        ):
            self._checkpoint.remove(record.uid)

    # --- start-up -------------------------------------------------------------

    def start_recovery(self) -> None:
        """Run `recover` in the background: the sockets can serve meanwhile, claim calls wait for it (RecoveryGate)."""
        self._gate = RecoveryGate()
        self._recovery_thread = threading.Thread(target=self._recover_in_background, name=f"recovery-{self.driver}", daemon=True)
        self._recovery_thread.start()

    def recovery_problem(self) -> str | None:
        """Why claim calls cannot be answered now (background recovery running or failed); None once they can."""
        return self._gate.problem() if self._gate is not None else None

    def wait_recovered(self, timeout: float) -> bool:
        """True once start-up recovery ended (or none runs in the background), waiting at most `timeout` seconds."""
        return self._gate is None or self._gate.wait(timeout)

    def _recover_in_background(self) -> None:
        try:
            self.recover()
        except Exception as exc:  # never serve claims from a partial picture of what is in use
            log.exception("start-up recovery failed; every claim call is refused until the driver restarts", extra=fields(driver=self.driver))
            if self._metrics is not None:
                self._metrics.errors.labels(self.driver, "recovery").inc()
            assert self._gate is not None
            self._gate.fail(f"{type(exc).__name__}: {exc}")

    def recover(self) -> None:
        """After a (re)start: rebuild reservations from evidence, finish or roll back interrupted claims,
        remove leftovers, reconcile the backend (recovery.py has the rules).

        All of it runs in the checkpoint section (the shared lock in rolling-update
        mode), so it sees a consistent file and no other instance records a claim
        meanwhile. A claim another live instance is working on (its lock file is
        held) is left alone, and the backend is not reconciled while such a claim
        is in flight: reconcile would destroy the partitions that instance is creating.
        """
        with self._checkpoint_section():
            if self._section is None:
                self._checkpoint.load()
            self._hold_for_tests(RECOVERY_HOLD, "during-recovery")
            in_flight = self._recovery.run()
            if in_flight:
                log.warning(
                    "another driver instance is preparing claims; backend reconcile skipped",
                    extra=fields(driver=self.driver, claims=sorted(in_flight)),
                )
            else:
                self.backend.reconcile([r.backend_state for r in self._checkpoint.records() if r.completed])
        if self._metrics is not None:
            self._metrics.prepared_devices.labels(self.driver).set(self.prepared_device_count())
            self._metrics.holders.sync(self.driver, [h for h in map(_held, self._checkpoint.records()) if h is not None])
        if self._gate is not None:
            self._gate.open()

    def _reload(self) -> None:
        """Rolling-update mode: re-read the records another instance changed; damage found then is
        turned into reservations at once, as at start-up."""
        self._checkpoint.load()
        damaged = self._checkpoint.take_damaged()
        if damaged:
            self._recovery.rebuild(damaged)

    def _try_claim(self, uid: str) -> AbstractContextManager[bool]:
        if self._claim_files is None:
            return nullcontext(True)  # single instance: nobody else can be working on it
        return self._claim_files.try_hold(uid)


def _held(record: ClaimRecord | None) -> HeldClaim | None:
    """What the holder metrics publish for a claim: its devices once completed, else nothing."""
    if record is None or not record.completed:
        return None
    return HeldClaim(record.uid, record.namespace, record.name, [(d.pool, d.device) for d in record.devices])


def _name(ref: ClaimRef) -> str:
    return f"{ref.namespace}/{ref.name}"


def _check_identity(ref: ClaimRef, record: ClaimRecord, operation: str) -> None:
    """A record answers only to the UID, namespace and name it was prepared for: a call naming another claim with
    its UID would get its devices (prepare) or tear down its running holder (unprepare). A record rebuilt from a
    spec without claim data knows no name; its UID alone identifies it."""
    if not record.namespace and not record.name:
        return
    if (record.namespace, record.name) != (ref.namespace, ref.name):
        raise ClaimError(
            f"{operation} of ResourceClaim {_name(ref)} refused: claim UID {ref.uid} is prepared on this node for ResourceClaim "
            f"{record.namespace}/{record.name}; UID, namespace and name must all match the claim's (nothing was changed)"
        )


def _logged(ref: ClaimRef) -> dict[str, str]:
    """The claim's identity for a log line, cut short: an invalid reference may be megabytes long."""
    return {"claim": bounded(_name(ref), 300), "uid": bounded(ref.uid, 160)}


def _check_time_left(deadline: float | None, operation: str) -> None:
    """A claim that waited (for the worker pool or its lock) past the deadline does not start: nobody reads its answer."""
    if deadline is not None and time.monotonic() >= deadline:
        raise ClaimError(f"{operation} did not start before the kubelet's deadline (busy with other claims); the kubelet will retry")


def _collect(futures: dict[str, Future[PrepareOutcome]], deadline: float | None, operation: str) -> dict[str, PrepareOutcome]:
    """Each claim's outcome; one not done by the deadline gets its own error and finishes in the background
    (a prepare then answers the kubelet's retry from the checkpoint)."""
    done, _ = wait(futures.values(), timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
    outcomes = {}
    for uid, future in futures.items():
        cancelled = future not in done and future.cancel()
        if future.done() and not cancelled:  # done, if only since the wait returned
            outcomes[uid] = future.result()
            continue
        started = not cancelled
        log.warning("claim not done before the kubelet's deadline", extra=fields(operation=operation, uid=bounded(uid, 160), started=started))
        outcomes[uid] = PrepareOutcome(
            error=f"{operation} of claim {uid} did not finish before the kubelet's deadline"
            + (
                "; it goes on and the kubelet's retry gets its result"
                if started
                else " (not started: busy with other claims); the kubelet will retry"
            )
        )
    return outcomes


def _bound_errors(outcomes: dict[str, PrepareOutcome]) -> None:
    """Shrink the error texts so that all of them together stay within the response budget."""
    limit = error_limit(sum(1 for outcome in outcomes.values() if outcome.error))
    for outcome in outcomes.values():
        if outcome.error:
            outcome.error = bounded(outcome.error, limit)


def _node_name(backend: VendorBackend) -> str:
    settings = getattr(backend, "settings", None)
    return settings.node_name if isinstance(settings, BackendSettings) else ""


def _amount(value: Decimal) -> str:
    """A capacity total as people read it (binary suffixes for whole byte counts)."""
    return quantity.from_bytes(int(value)) if value == value.to_integral_value() and value >= 0 else str(value)
