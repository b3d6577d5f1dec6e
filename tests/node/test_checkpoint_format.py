"""Checkpoint format 2 (dra_driver/node/checkpoint.py): one record file per claim; round trips, torn/corrupt files, boot ID."""

from __future__ import annotations

import os

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.node.conftest import records_on_disk

from dra_driver.node.checkpoint import PREPARE_COMPLETED, PREPARE_STARTED, Checkpoint, CheckpointDevice, ClaimRecord


def record(uid: str, phase: str = PREPARE_COMPLETED) -> ClaimRecord:
    return ClaimRecord(uid, "ns", f"claim-{uid}", phase, [CheckpointDevice("gpu", "pool", "gpu-0", cdi_ids=["k/c=x"])], {"mig": [1]})  # type: ignore[arg-type]


def test_round_trip(tmp_path: Path, boot: Path):
    ckpt = Checkpoint(tmp_path / "cp", boot)
    ckpt.put(record("u1"))
    ckpt.put(record("u2", PREPARE_STARTED))
    ckpt.remove("u2")
    assert records_on_disk(tmp_path / "cp", boot) == {"u1": record("u1")}


def test_checkpoint_from_other_boot_is_void(tmp_path: Path, boot: Path):
    Checkpoint(tmp_path / "cp", boot).put(record("u1"))
    boot.write_text("boot-2\n")
    assert records_on_disk(tmp_path / "cp", boot) == {}


def test_corrupt_record_is_moved_aside_and_the_others_survive(tmp_path: Path, boot: Path, caplog):
    path = tmp_path / "cp"
    writer = Checkpoint(path, boot)
    writer.put(record("u1"))
    writer.put(record("u2"))
    doc = json.loads((path / "u1.json").read_text())
    doc["body"]["record"]["devices"][0]["device"] = "gpu-9"  # tampered: checksum no longer matches
    (path / "u1.json").write_text(json.dumps(doc))
    ckpt = Checkpoint(path, boot)
    ckpt.load()
    assert [r.uid for r in ckpt.records()] == ["u2"]
    assert sorted(p.name.split(".corrupt-")[0] for p in path.iterdir()) == ["u1.json", "u2.json"]
    assert not (path / "u1.json").exists() and len(list(path.glob("u1.json.corrupt-*"))) == 1
    assert "checksum mismatch" in caplog.text
    (path / "u2.json").write_text("{not json")
    ckpt.load()
    assert ckpt.records() == []


def test_concurrent_puts_are_all_on_disk(tmp_path: Path, boot: Path):
    ckpt = Checkpoint(tmp_path / "cp", boot)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: ckpt.put(record(f"u{i}")), range(64)))
    ckpt.remove("u3")
    assert sorted(records_on_disk(tmp_path / "cp", boot)) == sorted(f"u{i}" for i in range(64) if i != 3)


def test_torn_record_is_ignored_and_set_aside(tmp_path: Path, boot: Path, caplog):
    path = tmp_path / "cp"
    ckpt = Checkpoint(path, boot)
    for uid in ("a", "b", "c"):
        ckpt.put(record(uid))
    data = (path / "b.json").read_bytes()
    (path / "b.json").write_bytes(data[: len(data) // 2])  # a write cut short (power loss without rename ordering)
    assert sorted(records_on_disk(path, boot)) == ["a", "c"]
    assert "not JSON" in caplog.text
    assert sorted(records_on_disk(path, boot)) == ["a", "c"]  # set aside once, not re-read as a record


def test_valid_json_with_a_bad_record_is_corrupt_not_a_crash(tmp_path: Path, boot: Path):
    path = tmp_path / "cp"
    Checkpoint(path, boot).put(record("a"))
    body = {"boot_id": "boot-1", "record": {"uid": "a"}, "version": 2}  # signed, but fields are missing
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    (path / "a.json").write_text(json.dumps({"body": body, "checksum": hashlib.sha256(canonical.encode()).hexdigest()}))
    assert records_on_disk(path, boot) == {}


def test_records_from_another_boot_are_void_and_deleted(tmp_path: Path, boot: Path, caplog):
    path = tmp_path / "cp"
    Checkpoint(path, boot).put(record("old"))
    boot.write_text("boot-2\n")
    Checkpoint(path, boot).put(record("new"))
    assert sorted(records_on_disk(path, boot)) == ["new"]
    assert sorted(p.name for p in path.iterdir()) == ["new.json"]
    assert "another boot" in caplog.text


def test_a_write_touches_only_its_own_claims_file(tmp_path: Path, boot: Path):
    path = tmp_path / "cp"
    ckpt = Checkpoint(path, boot)
    for uid in ("a", "b"):
        ckpt.put(record(uid, PREPARE_STARTED))
    before = (path / "a.json").stat().st_ino
    ckpt.put(record("b"))
    ckpt.remove("c-missing")
    assert (path / "a.json").stat().st_ino == before
    ckpt.remove("b")
    assert sorted(p.name for p in path.iterdir()) == ["a.json"]


def test_uid_that_is_not_a_file_name_round_trips_under_its_hash(tmp_path: Path, boot: Path):
    path = tmp_path / "cp"
    odd = "../../etc/passwd"
    Checkpoint(path, boot).put(record(odd))
    assert [p.parent for p in path.iterdir()] == [path]  # nothing written outside the directory
    assert list(records_on_disk(path, boot)) == [odd]


def test_record_copied_under_another_claims_name_is_rejected(tmp_path: Path, boot: Path):
    path = tmp_path / "cp"
    Checkpoint(path, boot).put(record("a"))
    (path / "b.json").write_bytes((path / "a.json").read_bytes())
    assert sorted(records_on_disk(path, boot)) == ["a"]


def test_leftover_temp_files_are_not_records(tmp_path: Path, boot: Path):
    path = tmp_path / "cp"
    Checkpoint(path, boot).put(record("a"))
    (path / ".b.json.x1.tmp").write_bytes((path / "a.json").read_bytes())
    assert sorted(records_on_disk(path, boot)) == ["a"]


def test_reload_sees_another_writers_changes(tmp_path: Path, boot: Path):
    path = tmp_path / "cp"
    mine, theirs = Checkpoint(path, boot), Checkpoint(path, boot)
    mine.put(record("a", PREPARE_STARTED))
    theirs.load()
    theirs.put(record("a"))
    theirs.put(record("b"))
    mine.load()
    assert mine.get("a") is not None and mine.get("a").completed  # type: ignore[union-attr]
    assert sorted(r.uid for r in mine.records()) == ["a", "b"]
    theirs.remove("a")
    mine.load()
    assert [r.uid for r in mine.records()] == ["b"]


@pytest.mark.parametrize("cut", ["mid-line", "newline-kept"])
def test_torn_last_line_is_damage_reported_with_the_earlier_valid_line(tmp_path: Path, boot: Path, caplog, cut: str):
    """A last line cut short looks the same whether a crash cut the append or the file was truncated
    long after the claim was answered, so it is never silently "the previous state": the file is set
    aside and reported, with the earlier valid line, for recovery to decide with the claim's spec."""
    path = tmp_path / "cp"
    ckpt = Checkpoint(path, boot)
    ckpt.put(record("a", PREPARE_STARTED))
    ckpt.put(record("a"))
    data = (path / "a.json").read_bytes()
    (path / "a.json").write_bytes(data[:-40] + (b"\n" if cut == "newline-kept" else b""))
    again = Checkpoint(path, boot)
    again.load()
    assert again.records() == []
    [damage] = again.take_damaged()
    assert damage.uid == "a" and damage.last_good == record("a", PREPARE_STARTED) and damage.moved_to is not None
    assert damage.moved_to.read_bytes() == data[:-40] + (b"\n" if cut == "newline-kept" else b"")
    assert not (path / "a.json").exists() and "is corrupt" in caplog.text
    assert again.take_damaged() == []  # taken once


def test_append_after_a_torn_line_starts_a_fresh_line(tmp_path: Path, boot: Path):
    path = tmp_path / "cp"
    ckpt = Checkpoint(path, boot)
    ckpt.put(record("a", PREPARE_STARTED))
    with open(path / "a.json", "ab") as handle:
        handle.write(b'\n{"body":{"boot_id":"boo')  # a crash mid-append, no newline after it
    ckpt.put(record("a"))
    assert records_on_disk(path, boot)["a"].completed


def test_every_change_is_one_appended_line(tmp_path: Path, boot: Path):
    path = tmp_path / "cp"
    ckpt = Checkpoint(path, boot)
    ckpt.put(record("a", PREPARE_STARTED))
    ckpt.put(record("a", PREPARE_STARTED), durable=False)
    ckpt.put(record("a"))
    lines = [json.loads(line) for line in (path / "a.json").read_bytes().split(b"\n") if line]
    assert [line["body"]["record"]["phase"] for line in lines] == [PREPARE_STARTED, PREPARE_STARTED, PREPARE_COMPLETED]


def test_empty_record_file_is_no_record_and_is_removed(tmp_path: Path, boot: Path):
    path = tmp_path / "cp"
    Checkpoint(path, boot).put(record("a"))
    (path / "b.json").write_bytes(b"")  # created, then killed before its first line
    assert sorted(records_on_disk(path, boot)) == ["a"]
    assert not (path / "b.json").exists()  # nothing left behind once its claim is gone


def test_failed_append_to_an_existing_record_leaves_the_previous_state(tmp_path: Path, boot: Path, monkeypatch):

    path = tmp_path / "cp"
    ckpt = Checkpoint(path, boot)
    ckpt.put(record("a", PREPARE_STARTED))
    before = (path / "a.json").read_bytes()

    real_write = os.write
    calls: list[int] = []

    def disk_fills_up(fd: int, data: bytes) -> int:  # part of the line lands, then ENOSPC
        calls.append(fd)
        if len(calls) == 1:
            return real_write(fd, bytes(data[:10]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", disk_fills_up)
    with pytest.raises(OSError):
        ckpt.put(record("a"))
    monkeypatch.undo()
    assert (path / "a.json").read_bytes() == before  # the torn part was cut off again


def _damaged_after_load(path: Path, boot: Path) -> tuple[dict[str, ClaimRecord], list]:
    ckpt = Checkpoint(path, boot)
    ckpt.load()
    return {r.uid: r for r in ckpt.records()}, ckpt.take_damaged()


@pytest.mark.parametrize("kind", ["symlink-to-valid-record", "symlink-dangling", "directory", "fifo"])
def test_what_is_not_a_regular_file_is_never_read_and_never_fatal(tmp_path: Path, boot: Path, kind: str):
    path = tmp_path / "cp"
    Checkpoint(path, boot).put(record("a"))
    outside = tmp_path / "outside.json"
    outside.write_bytes((path / "a.json").read_bytes())
    target = path / "b.json"
    if kind == "symlink-to-valid-record":
        target.symlink_to(path / "a.json")
    elif kind == "symlink-dangling":
        target.symlink_to(tmp_path / "nowhere")
    elif kind == "directory":
        (target / "x").mkdir(parents=True)
    else:
        os.mkfifo(target)
    records, damaged = _damaged_after_load(path, boot)
    assert list(records) == ["a"]
    assert [(d.uid, d.last_good, d.salvaged) for d in damaged] == [("b", None, None)]
    assert not os.path.lexists(target) and damaged[0].moved_to is not None and os.path.lexists(damaged[0].moved_to)
    assert outside.read_bytes() == (path / "a.json").read_bytes()  # nothing written through a link


def test_flipped_byte_reports_what_the_line_still_says_and_an_earlier_valid_line(tmp_path: Path, boot: Path):
    path = tmp_path / "cp"
    ckpt = Checkpoint(path, boot)
    ckpt.put(record("a", PREPARE_STARTED))
    ckpt.put(record("a"))
    data = (path / "a.json").read_bytes()
    at = data.rindex(b'"phase"') + 1
    (path / "a.json").write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :])
    records, [damage] = _damaged_after_load(path, boot)
    assert records == {} and "checksum" in damage.reason
    assert damage.last_good == record("a", PREPARE_STARTED)
    assert damage.salvaged is not None and [(d.pool, d.device) for d in damage.salvaged.devices] == [("pool", "gpu-0")]


def test_damaged_record_under_a_hashed_name_is_attributed_by_its_readable_content(tmp_path: Path, boot: Path):
    path = tmp_path / "cp"
    odd = "../x"
    Checkpoint(path, boot).put(record(odd))
    [file] = list(path.iterdir())
    file.write_bytes(file.read_bytes().replace(b'"checksum":"', b'"checksum":"0'))
    _, [damage] = _damaged_after_load(path, boot)
    assert damage.uid == odd and damage.salvaged is not None


def test_record_directory_replaced_by_a_file_is_moved_aside_and_recreated(tmp_path: Path, boot: Path):
    path = tmp_path / "cp"
    path.write_text("junk")
    records, [damage] = _damaged_after_load(path, boot)
    assert records == {} and damage.path == path and damage.uid is None
    assert path.is_dir() and damage.moved_to is not None and damage.moved_to.read_text() == "junk"
    Checkpoint(path, boot).put(record("a"))  # writable again


def test_removing_a_record_whose_file_became_a_directory_moves_it_aside(tmp_path: Path, boot: Path):
    path = tmp_path / "cp"
    ckpt = Checkpoint(path, boot)
    ckpt.put(record("a"))
    (path / "a.json").unlink()
    (path / "a.json").mkdir()
    ckpt.remove("a")
    assert ckpt.get("a") is None and not (path / "a.json").exists()
    assert len(list(path.glob("a.json.corrupt-*"))) == 1


def test_leftover_temp_files_of_rewrites_are_removed_on_load(tmp_path: Path, boot: Path):
    path = tmp_path / "cp"
    Checkpoint(path, boot).put(record("a"))
    (path / ".a.json.k3j4.tmp").write_bytes(b"partial")
    records_on_disk(path, boot)
    assert sorted(p.name for p in path.iterdir()) == ["a.json"]
