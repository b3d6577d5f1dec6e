"""Directory modes set whatever the umask; directories the driver owns narrowed or refused; shared ones only lose
write permission for others, and a sticky one (/tmp) is never changed."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.common import file_modes
from dra_driver.common.file_modes import Expectation, PermissionProblem


@pytest.fixture
def umask_000() -> Iterator[None]:
    previous = os.umask(0)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_made_directories_get_exactly_their_mode(tmp_path: Path, umask_000: None) -> None:
    file_modes.make_dirs(tmp_path / "a" / "b", 0o750)
    assert (mode(tmp_path / "a"), mode(tmp_path / "a" / "b")) == (0o750, 0o750)
    file_modes.make_dirs(tmp_path / "a", 0o700)  # an existing one is left as it is
    assert mode(tmp_path / "a") == 0o750


def test_an_owned_directory_found_wider_is_narrowed(tmp_path: Path, umask_000: None) -> None:
    (tmp_path / "state").mkdir(mode=0o777)
    file_modes.own_dir(tmp_path / "state")
    assert mode(tmp_path / "state") == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_an_owned_directory_of_another_user_refuses(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    os.chown(tmp_path / "state", 65534, 65534)
    with pytest.raises(PermissionProblem, match="owned by uid 65534, not by the driver's uid 0"):
        file_modes.own_dir(tmp_path / "state")
    assert file_modes.check(Expectation(tmp_path / "state", 0o700, "state dir")) == (
        f"state dir {tmp_path / 'state'}: owned by uid 65534, expected the driver's uid 0; remove it and restart the driver"
    )


def test_a_shared_directory_loses_write_for_others_only(tmp_path: Path, umask_000: None) -> None:
    (tmp_path / "cdi").mkdir(mode=0o775)
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp").chmod(0o1777)
    file_modes.shared_dir(tmp_path / "cdi", 0o755)
    file_modes.shared_dir(tmp_path / "tmp", 0o755)
    assert (mode(tmp_path / "cdi"), mode(tmp_path / "tmp")) == (0o755, 0o1777)
    assert file_modes.check(Expectation(tmp_path / "tmp", 0o755, "CDI dir", exact=False)) == (
        f"CDI dir {tmp_path / 'tmp'}: mode 1777 lets group or others write; chmod go-w {tmp_path / 'tmp'}"
    )


def test_check_names_a_wrong_mode_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir(mode=0o700)
    (tmp_path / "s").chmod(0o755)
    assert (
        file_modes.check(Expectation(tmp_path / "s", 0o700, "state dir"))
        == f"state dir {tmp_path / 's'}: mode 0755, expected 0700; chmod 0700 {tmp_path / 's'}"
    )
    assert file_modes.check(Expectation(tmp_path / "missing", 0o700, "state dir")) is None
