"""Checkpoint write paths used by prepare: durable vs non-durable writes, stage/commit/forget, group commit."""

from __future__ import annotations

import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from tests.node.conftest import records_on_disk

from dra_driver.common import atomic_file
from dra_driver.node.checkpoint import PREPARE_COMPLETED, PREPARE_STARTED, Checkpoint, CheckpointDevice, ClaimRecord


def record(uid: str, phase=PREPARE_STARTED, devices: int = 1) -> ClaimRecord:
    devs = [CheckpointDevice("gpu", "pool", f"gpu-{i}", share_id="s" if i else None, cdi_ids=[f"k/c={uid}-{i}"]) for i in range(devices)]
    return ClaimRecord(uid, "ns", uid, phase, devs, {"created": [{"gi": 1}]}, "/cdi/x.json")


@pytest.fixture
def no_boot(tmp_path: Path) -> Path:
    """No boot ID (non-Linux): records outlive reboots, so durable writes are flushed."""
    return tmp_path / "no-boot-id"


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = atomic_file.datasync
    monkeypatch.setattr(atomic_file, "datasync", lambda fd: (calls.append(fd), real(fd)))
    return calls


def test_record_json_matches_asdict():
    rec = record("u1", PREPARE_COMPLETED, devices=2)

    def expected(r: ClaimRecord, leave_out: tuple[str, ...]) -> dict:
        out = {k: v for k, v in asdict(r).items() if k not in leave_out}
        out["devices"] = [{k: v for k, v in d.items() if k != "consumed" or v} for d in out["devices"]]
        return out

    # The later fields (a device's consumed capacity too) are left out while unset; spec_on_disk is memory only.
    assert rec.to_json() == expected(rec, ("spec_json", "recovered", "spec_on_disk"))
    full = replace(rec, spec_json='{"devices":[]}', recovered="cdi-spec")
    full.devices[0] = replace(full.devices[0], share_id="4f1c2d3e-0000-4000-8000-000000000001", consumed={"memory": "20Gi"})
    assert full.to_json() == expected(full, ("spec_on_disk",)) and full.to_json()["devices"][0]["consumed"] == {"memory": "20Gi"}
    assert ClaimRecord.from_json(full.to_json()) == full


def test_memory_keeps_records_without_their_spec_text_which_stays_readable_in_the_file(tmp_path: Path, boot: Path):
    """A completed claim's spec text (~6 KiB) is the largest part of its record: memory leaves it to the file."""
    ckpt = Checkpoint(tmp_path / "cp.json", boot)
    ckpt.put(replace(record("u1", PREPARE_COMPLETED, devices=1), spec_json='{"cdiVersion":"0.5.0"}'))
    kept = ckpt.get("u1")
    assert kept is not None and kept.spec_json is None and kept.spec_on_disk and kept.answerable
    assert ckpt.spec_text("u1") == '{"cdiVersion":"0.5.0"}'
    restarted = Checkpoint(tmp_path / "cp.json", boot)
    restarted.load()
    loaded = restarted.get("u1")
    assert loaded is not None and loaded.spec_json is None and loaded.spec_on_disk
    assert restarted.spec_text("u1") == '{"cdiVersion":"0.5.0"}'
    # A record written again without the text (unprepare started) no longer claims the file holds one.
    restarted.put(replace(loaded, phase="UnprepareStarted"))
    again = restarted.get("u1")
    assert again is not None and not again.spec_on_disk and restarted.spec_text("u1") is None


def test_with_a_boot_id_nothing_is_flushed_yet_every_write_is_visible_to_a_restart(tmp_path: Path, boot: Path, syncs: list[int]):
    ckpt = Checkpoint(tmp_path / "cp.json", boot)
    assert not ckpt.flush
    ckpt.put(record("u1"))
    ckpt.put(replace(record("u1"), phase=PREPARE_COMPLETED))
    ckpt.commit(ckpt.stage(record("u2")))
    assert syncs == []  # a reboot voids the records, so a device flush would protect nothing
    found = records_on_disk(ckpt.path, boot)
    assert found["u1"].completed and "u2" in found


def test_non_durable_write_is_visible_but_a_durable_commit_still_flushes(tmp_path: Path, no_boot: Path, syncs: list[int]):
    boot = no_boot
    ckpt = Checkpoint(tmp_path / "cp.json", boot)
    assert ckpt.flush
    ckpt.put(record("u1"), durable=False)
    assert syncs == []
    assert "u1" in records_on_disk(ckpt.path, boot)  # a restarted process reads it
    version = ckpt.stage(replace(record("u1"), phase=PREPARE_COMPLETED))
    ckpt.commit(version)
    assert len(syncs) == 1  # written by the non-durable path is not "durable"
    assert records_on_disk(ckpt.path, boot)["u1"].completed
    ckpt.commit(version)
    assert len(syncs) == 1  # already durable: nothing more to do


def test_staged_record_reaches_the_file_only_on_commit_and_forget_drops_it(tmp_path: Path, boot: Path):
    ckpt = Checkpoint(tmp_path / "cp.json", boot)
    ckpt.put(record("keep"))
    version = ckpt.stage(record("u1"))
    assert ckpt.get("u1") is not None  # visible to the conflict check at once
    assert "u1" not in records_on_disk(ckpt.path, boot)
    ckpt.commit(version)
    assert "u1" in records_on_disk(ckpt.path, boot)
    ckpt.forget("u1")
    assert ckpt.get("u1") is None
    ckpt.put(record("u2"))
    assert sorted(records_on_disk(ckpt.path, boot)) == ["keep", "u2"]


def test_completed_device_count_follows_every_change(tmp_path: Path, boot: Path):
    ckpt = Checkpoint(tmp_path / "cp.json", boot)
    ckpt.put(record("a", devices=2))
    assert ckpt.completed_device_count() == 0  # started claims hold no prepared devices yet
    ckpt.put(record("a", PREPARE_COMPLETED, devices=2))
    ckpt.put(record("b", PREPARE_COMPLETED, devices=3))
    ckpt.put(record("b", PREPARE_COMPLETED, devices=1))  # replaced, not added
    assert ckpt.completed_device_count() == 3
    ckpt.remove("a")
    ckpt.forget("missing")
    assert ckpt.completed_device_count() == 1
    again = Checkpoint(ckpt.path, boot)
    again.load()
    assert again.completed_device_count() == 1


def test_concurrent_durable_puts_each_return_durable_and_flush_only_their_own_record(tmp_path: Path, no_boot: Path, monkeypatch: pytest.MonkeyPatch):
    boot = no_boot
    real = atomic_file.datasync
    flushes: list[int] = []

    def slow_sync(fd: int) -> None:  # a slow disk makes writers queue behind one flush
        time.sleep(0.02)
        flushes.append(fd)
        real(fd)

    monkeypatch.setattr(atomic_file, "datasync", slow_sync)
    ckpt = Checkpoint(tmp_path / "cp.json", boot)
    missing: list[str] = []
    lock = threading.Lock()

    def put(i: int) -> None:
        uid = f"u{i}"
        ckpt.put(record(uid))
        # On return the record must already be in its file. Read back from a copy: load() tidies the directory
        # (an empty record file is a leftover to it), which is only safe with no writer running, as at start-up.
        copy = tmp_path / f"copy-{i}" / "cp.json"
        copy.mkdir(parents=True)
        shutil.copy(ckpt.path / f"{uid}.json", copy / f"{uid}.json")
        if uid not in records_on_disk(copy, boot):
            with lock:
                missing.append(uid)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(32)))
    assert missing == []
    assert len(flushes) == 32  # one small file per claim: nobody flushes (or waits for) another claim's record
    assert sorted(records_on_disk(ckpt.path, boot)) == sorted(f"u{i}" for i in range(32))


def test_failed_write_leaves_no_temp_file(tmp_path: Path, no_boot: Path, monkeypatch: pytest.MonkeyPatch):
    boot = no_boot
    ckpt = Checkpoint(tmp_path / "cp.json", boot)
    ckpt.put(record("u1"))

    def broken(fd: int) -> None:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(atomic_file, "datasync", broken)
    with pytest.raises(OSError):
        ckpt.put(record("u2"))
    assert sorted(p.name for p in (tmp_path / "cp.json").iterdir()) == ["u1.json"]
    assert sorted(records_on_disk(ckpt.path, boot)) == ["u1"]


def test_device_index_lists_every_holder_and_follows_changes(tmp_path: Path, boot: Path):
    ckpt = Checkpoint(tmp_path / "cp.json", boot)
    ckpt.put(record("a", devices=2))  # gpu-0, gpu-1
    ckpt.put(record("b", devices=1))  # gpu-0
    assert sorted(r.uid for r, _ in ckpt.holders("pool", "gpu-0")) == ["a", "b"]
    assert [(r.uid, d.device, d.share_id) for r, d in ckpt.holders("pool", "gpu-1")] == [("a", "gpu-1", "s")]
    ckpt.put(record("a", devices=1))  # a shrinks to gpu-0 only
    assert ckpt.holders("pool", "gpu-1") == []
    ckpt.remove("b")
    again = Checkpoint(ckpt.path, boot)
    again.load()
    assert [r.uid for r, _ in again.holders("pool", "gpu-0")] == ["a"]
    assert again.holders("other-pool", "gpu-0") == []


@pytest.mark.parametrize(
    "state", [{}, {"spec_json": "x", "uid": "u9"}, {"nested": {"spec_json": "y\"z", "uid": "u9"}}], ids=["plain", "key-in-state", "deeper"]
)
def test_a_load_reads_records_without_their_spec_text_whatever_the_backend_state_holds(tmp_path: Path, boot: Path, state: dict) -> None:
    """The load cuts the spec text out of each line before parsing it; keys of the same name in the backend state
    are never taken for it (such a line is read the full way)."""
    written = [
        replace(record("u1", PREPARE_COMPLETED, devices=1), backend_state=dict(state), spec_json='{"a":"b\\\\","c":"\\"d"}'),
        replace(record("u2", PREPARE_COMPLETED, devices=1), backend_state=dict(state)),
    ]
    ckpt = Checkpoint(tmp_path / "cp.json", boot)
    for rec in written:
        ckpt.put(rec)
    restarted = Checkpoint(tmp_path / "cp.json", boot)
    restarted.load()
    for rec in written:
        loaded = restarted.get(rec.uid)
        assert loaded == replace(rec, spec_json=None, spec_on_disk=rec.spec_json is not None)
        assert restarted.spec_text(rec.uid) == rec.spec_json
