"""common/node_file: the one reader of node state and foreign files never blocks, never follows a link it was not
told to, reads only regular files, and stops at its bound; the error names the path, what is there and the fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.hostile_paths import HOSTILE, plant, returns_within

from dra_driver.backend import sysfs
from dra_driver.common import node_file


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_pipe_or_a_link_to_dev_zero_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "state.json"
    plant(path, kind)
    with pytest.raises(node_file.NodeFileError) as refused:
        returns_within(lambda: node_file.read_regular(path, 1024), path)
    what = "a named pipe, not a regular file" if kind == "fifo" else "a symlink, which is never followed here"
    assert str(refused.value) == f"{path}: is {what}; remove it" + (
        "; only a regular file is read here" if kind == "fifo" else "; the driver writes this file itself"
    )
    assert isinstance(refused.value, OSError)  # readers that treat an unreadable file as damage keep doing so


def test_a_followed_link_must_still_end_at_a_regular_file(tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to("/dev/zero")
    with pytest.raises(node_file.NodeFileError, match="is a character device, not a regular file"):
        node_file.read_regular(link, 1024, follow_symlinks=True)
    target = tmp_path / "real"
    target.write_bytes(b"12345\n")
    link.unlink()
    link.symlink_to(target)
    assert node_file.read_regular(link, 1024, follow_symlinks=True) == b"12345\n"


def test_a_directory_or_a_file_over_the_bound_is_refused(tmp_path: Path) -> None:
    with pytest.raises(node_file.NodeFileError, match="is a directory"):
        node_file.read_regular(tmp_path, 1024)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 1025)
    with pytest.raises(node_file.NodeFileError, match="larger than 1024 bytes"):
        node_file.read_regular(big, 1024)
    assert node_file.read_regular(big, 1025) == b"x" * 1025
    with pytest.raises(FileNotFoundError):
        node_file.read_regular(tmp_path / "missing", 1024)


def test_open_regular_leaves_no_descriptor_behind_on_refusal(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        with pytest.raises(node_file.NodeFileError):
            node_file.open_regular(fifo)
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_sysfs_attribute_that_is_a_pipe_or_dev_zero_reads_as_absent(tmp_path: Path, kind: str) -> None:
    """A backend's sysfs tree (Gaudi, AMD) read as links allow, but a pipe or a character device is not an attribute."""
    attribute = tmp_path / "device" / "status"
    plant(attribute, kind)
    assert returns_within(lambda: sysfs.read_text(attribute), attribute) is None


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../x", "a\0b"])
def test_a_child_path_is_one_name_in_its_directory(name: str) -> None:
    with pytest.raises(ValueError, match="not a file name"):
        node_file.child_path(Path("/cdi"), name)
    assert node_file.child_path(Path("/cdi"), "x.json") == node_file.child_path("/cdi/", "x.json") == "/cdi/x.json"


@pytest.mark.parametrize("uid", ["../../etc/passwd", "a/b", "..", ".", "", "-rf", "x" * 201, "uid\0nul", "é"])
def test_a_uid_that_is_no_plain_file_name_is_named_by_its_hash(uid: str) -> None:
    stem = node_file.claim_file_stem(uid)
    assert stem.startswith(node_file.HASHED_PREFIX) and len(stem) == len(node_file.HASHED_PREFIX) + 64
    assert node_file.child_path("/state", stem + ".json") == f"/state/{stem}.json"  # always one name in its directory
    assert node_file.claim_file_stem(uid + "x") != stem


def test_a_kubernetes_uid_is_its_own_file_name() -> None:
    uid = "0f1c2a4e-7d3b-4c5e-9a8b-1234567890ab"
    assert node_file.claim_file_stem(uid) == uid
