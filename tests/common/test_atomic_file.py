"""atomic_file: temp names runtimes and loaders skip, exact modes whatever the umask, nothing left on failure."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.common import atomic_file

from dra_driver.node import cdi

UID = "0b4f3c2e-5d6a-4b7c-8d9e-0f1a2b3c4d5e"


@pytest.fixture
def umask_027() -> Iterator[None]:
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def test_temp_name_is_dot_target_random_tmp_and_names_its_claim(tmp_path: Path) -> None:
    spec = Path(cdi.spec_path(tmp_path, "gpu.nvidia.com", UID))
    fd, name = atomic_file.create_temp(str(spec))
    os.close(fd)
    temp = Path(name)
    assert temp.parent == tmp_path
    assert re.fullmatch(rf"\.{re.escape(spec.name)}\.[0-9a-f]{{12}}\.tmp", temp.name)
    assert cdi.leftover_temp_files(tmp_path, "gpu.nvidia.com") == [(UID, temp)]


def test_temp_names_differ_and_never_reuse_an_existing_file(tmp_path: Path) -> None:
    target = str(tmp_path / "record.json")
    names = set()
    for _ in range(50):
        fd, name = atomic_file.create_temp(target)
        os.close(fd)
        names.add(name)
    assert len(names) == 50


def test_temp_beside_a_relative_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    fd, name = atomic_file.create_temp("spec.json")
    os.close(fd)
    assert name.startswith(".spec.json.") and (tmp_path / name).is_file()


def test_mode_is_exact_whatever_the_umask(tmp_path: Path, umask_027: None) -> None:
    shared = tmp_path / "spec.json"
    private = tmp_path / "claim"
    atomic_file.replace_file(shared, b"{}", durable=False, mode=0o644)
    atomic_file.replace_file(private, b"{}", durable=False, mode=0o600)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o644  # runtimes may read specs as another user
    assert stat.S_IMODE(private.stat().st_mode) == 0o600


def test_replace_creates_a_missing_directory_and_replaces_content(tmp_path: Path) -> None:
    path = tmp_path / "new" / "dir" / "file.json"
    atomic_file.replace_file(path, b"one", durable=True)
    atomic_file.replace_file(path, b"two", durable=False)
    assert path.read_bytes() == b"two"
    assert [p.name for p in path.parent.iterdir()] == ["file.json"]


def test_a_failed_write_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "file.json"
    path.write_bytes(b"old")

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(atomic_file, "datasync", broken)
    with pytest.raises(OSError):
        atomic_file.replace_file(path, b"new", durable=True)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["file.json"]


def test_a_symlink_planted_at_a_temp_name_is_never_written_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"untouched")
    target = tmp_path / "file.json"
    planted = tmp_path / f".file.json.{'ab' * 6}.tmp"
    planted.symlink_to(victim)
    draws = iter([bytes.fromhex("ab" * 6), bytes.fromhex("cd" * 6)])
    monkeypatch.setattr(atomic_file.os, "urandom", lambda n: next(draws))
    atomic_file.replace_file(target, b"data", durable=False)
    assert victim.read_bytes() == b"untouched"
    assert target.read_bytes() == b"data"
