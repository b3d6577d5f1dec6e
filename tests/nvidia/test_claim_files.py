"""The one reader of NVIDIA's per-claim record files (claim_files.py), used by the MIG ownership journal and the sharing
records: hostile files are refused without blocking or following links, damaged and foreign records are ignored,
records of another boot are dropped."""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.hostile_paths import HOSTILE, plant, returns_within

from dra_driver.common.node_file import claim_file_stem
from dra_driver_nvidia.claim_files import ClaimFile, ClaimFiles
from dra_driver_nvidia.ownership import OwnedInstance, OwnershipJournal
from dra_driver_nvidia.sharing_records import SharingRecords

BOOT = "boot-1"


class Note(ClaimFile):
    text: str


def files(tmp_path: Path, max_bytes: int = 1 << 20) -> ClaimFiles[Note]:
    (tmp_path / "records").mkdir(parents=True, exist_ok=True)
    return ClaimFiles(tmp_path / "records", Note, 1, BOOT, "test record", max_bytes=max_bytes)


def put(records: ClaimFiles[Note], uid: str, **changes: Any) -> Path:
    body = {"version": 1, "bootId": BOOT, "claimUID": uid, "text": "hello", **changes}
    records.write(uid, json.dumps(body).encode())
    return path_of(records, uid)


def path_of(records: ClaimFiles[Note], uid: str) -> Path:
    return Path(records.path(uid))  # the product keeps it a str (node_file.child_path)


def test_a_record_written_is_read_back_by_its_claim(tmp_path: Path) -> None:
    records = files(tmp_path)
    put(records, "uid-1", text="one")
    put(records, "uid-2", text="two")
    assert records.read("uid-1") == Note(version=1, bootId=BOOT, claimUID="uid-1", text="one")
    assert [note.text for note in records.read_all()] == ["one", "two"]
    records.remove("uid-1")
    records.remove("uid-1")  # gone already: fine
    assert records.read("uid-1") is None and [note.claimUID for note in records.read_all()] == ["uid-2"]


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_pipe_or_a_link_in_a_records_place_is_refused_without_blocking(tmp_path: Path, kind: str) -> None:
    records = files(tmp_path)
    put(records, "uid-2")
    plant(path_of(records, "uid-1"), kind)
    assert returns_within(lambda: records.read("uid-1"), path_of(records, "uid-1")) is None
    assert [note.claimUID for note in returns_within(records.read_all, path_of(records, "uid-1"))] == ["uid-2"]


def test_a_record_cut_short_is_never_read_and_the_next_write_replaces_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A claim's first record is written in place (no temp file): a kill -9 between the create and the end of the write
    leaves a prefix of it, at any length. None of them is a record, and the claim's next write replaces it."""
    records = files(tmp_path)
    whole = put(records, "uid-1").read_bytes()
    for cut in range(len(whole)):
        path_of(records, "uid-1").write_bytes(whole[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert records.read("uid-1") is None and records.read_all() == [], cut
        assert "is corrupt" in caplog.text, cut
    put(records, "uid-1", text="again")
    assert records.read("uid-1") == Note(version=1, bootId=BOOT, claimUID="uid-1", text="again")


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_first_record_replaces_a_pipe_or_a_link_in_its_place_and_never_writes_into_it(tmp_path: Path, kind: str) -> None:
    records = files(tmp_path)
    plant(path_of(records, "uid-1"), kind)
    returns_within(lambda: put(records, "uid-1"), path_of(records, "uid-1"))
    assert stat.S_ISREG(os.lstat(path_of(records, "uid-1")).st_mode) and records.read("uid-1") is not None


def test_a_first_record_never_writes_through_a_link_to_a_file(tmp_path: Path) -> None:
    records = files(tmp_path)
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    path_of(records, "uid-1").symlink_to(victim)
    put(records, "uid-1")
    assert victim.read_bytes() == b"keep" and not path_of(records, "uid-1").is_symlink() and records.read("uid-1") is not None


def test_a_failed_first_write_leaves_no_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = files(tmp_path)

    def full(fd: int, data: Any) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space"):
        put(records, "uid-1")
    monkeypatch.undo()
    assert not path_of(records, "uid-1").exists() and list(records.directory.iterdir()) == []


@pytest.mark.parametrize(("boot", "flushes"), [(BOOT, 0), ("", 2)], ids=["boot-id", "no-boot-id"])
def test_records_are_flushed_to_the_device_only_without_a_boot_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, boot: str, flushes: int
) -> None:
    """With a boot ID every record is void after a reboot, the only thing that loses the page cache (as the checkpoint)."""
    (tmp_path / "records").mkdir()
    records = ClaimFiles(tmp_path / "records", Note, 1, boot, "test record")
    flushed: list[int] = []
    sync = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (flushed.append(fd), sync(fd))[1])
    for text in ("first", "replaced"):  # created in place, then replaced
        records.write("uid-1", json.dumps({"version": 1, "bootId": boot, "claimUID": "uid-1", "text": text}).encode())
    assert len(flushed) == flushes and records.read("uid-1") is not None


def test_a_link_to_a_valid_record_is_not_followed(tmp_path: Path) -> None:
    records = files(tmp_path)
    elsewhere = put(files(tmp_path / "other"), "uid-1")
    path_of(records, "uid-1").symlink_to(elsewhere)
    assert records.read("uid-1") is None


def test_a_record_larger_than_the_bound_is_not_read(tmp_path: Path) -> None:
    records = files(tmp_path, max_bytes=200)
    put(records, "uid-1", text="x" * 300)
    assert records.read("uid-1") is None


@pytest.mark.parametrize(
    ("content", "expected_log"),
    [
        (b"{not json", "is corrupt"),
        (b'{"version": 1, "bootId": "boot-1", "claimUID": "uid-1"}', "is corrupt"),  # a field missing
        (b'{"version": 1, "bootId": "boot-1", "claimUID": "uid-1", "text": "t", "extra": 1}', "is corrupt"),
        (b'{"version": 2, "bootId": "boot-1", "claimUID": "uid-1", "text": "t"}', "unknown format"),
        (b'{"version": 1, "bootId": "boot-1", "claimUID": "uid-9", "text": "t"}', "names another claim"),
        (b"\xff\xfe", "is corrupt"),
    ],
)
def test_a_damaged_or_foreign_record_is_ignored_and_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, expected_log: str
) -> None:
    records = files(tmp_path)
    path_of(records, "uid-1").write_bytes(content)
    with caplog.at_level(logging.INFO):
        assert records.read("uid-1") is None
    assert expected_log in caplog.text
    assert path_of(records, "uid-1").exists()  # never removed: the next write for the claim replaces it


def test_a_record_of_another_boot_is_dropped(tmp_path: Path) -> None:
    records = files(tmp_path)
    path = put(records, "uid-1", bootId="boot-0")
    assert records.read_all() == [] and not path.exists()


def test_a_uid_that_is_no_plain_file_name_is_stored_under_its_hash(tmp_path: Path) -> None:
    records = files(tmp_path)
    uid = "../../etc/passwd"
    path = put(records, uid)
    assert path.parent == records.directory and path.name == claim_file_stem(uid) + ".json" and path.name.startswith("sha256-")
    assert records.read(uid) is not None


Write = Callable[[Path], Path]


def _journal(state: Path) -> Path:
    journal = OwnershipJournal(state / "mig-owned", boot_id_path=_boot(state))
    journal.record(OwnedInstance("uid-1", "gpu-0-mig-1g10gb-19-0", "GPU-0", 19, 0))
    return state / "mig-owned" / "uid-1.json"


def _sharing(state: Path) -> Path:
    records = SharingRecords(state / "sharing", boot_id_path=_boot(state))
    records.put(records.new("uid-1", ["gpu-0"]))
    return state / "sharing" / "uid-1.json"


def _boot(state: Path) -> Path:
    state.mkdir(exist_ok=True)
    (state / "boot_id").write_text(BOOT + "\n")
    return state / "boot_id"


@pytest.mark.parametrize("write", [_journal, _sharing], ids=["ownership-journal", "sharing-records"])
@pytest.mark.parametrize("kind", HOSTILE)
def test_both_kinds_of_record_are_read_by_it(tmp_path: Path, write: Write, kind: str) -> None:
    """The ownership journal and the sharing records read their files through ClaimFiles: what it refuses, they do."""
    path = write(tmp_path)
    boot = tmp_path / "boot_id"
    reread = (
        (lambda: OwnershipJournal(path.parent, boot_id_path=boot).all_entries())
        if write is _journal
        else (lambda: SharingRecords(path.parent, boot_id_path=boot).all())
    )
    assert len(reread()) == 1
    plant(path, kind)
    assert returns_within(reread, path) == []
