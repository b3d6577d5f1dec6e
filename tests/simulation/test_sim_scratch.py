"""Scratch directories of simulated backends: named per process, removed on close, reaped only when their owner is dead."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dra_driver import sim_scratch


def _dead_pid() -> int:
    """The PID of a process that has exited (reuse within the test is vanishingly unlikely)."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    return int(child.stdout)


def _python(code: str, **kwargs: object) -> subprocess.Popen[str]:
    """A child process; it inherits $TMPDIR (empty_tmpdir)."""
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)  # type: ignore[call-overload]


def _fake_dir(parent: Path, name: str, *, lock: bool = True, age_s: float = 0.0) -> Path:
    path = parent / name
    path.mkdir()
    (path / "sys").mkdir()
    if lock:
        (path / sim_scratch.LOCK_NAME).touch()
    if age_s:
        old = time.time() - age_s
        os.utime(path, (old, old))
    return path


def test_a_scratch_dir_carries_vendor_and_pid_and_close_removes_it(empty_tmpdir: Path) -> None:
    with sim_scratch.create("nvidia") as scratch:
        assert scratch.path.parent == empty_tmpdir
        assert scratch.path.name.startswith(f"dra-nvidia-sim-{os.getpid()}-")
        assert scratch.path in sim_scratch.open_dirs()
        (scratch.path / "sys").mkdir()
    assert scratch.closed and not scratch.path.exists() and scratch.path not in sim_scratch.open_dirs()
    scratch.close()  # idempotent


def test_a_bad_vendor_name_is_refused(empty_tmpdir: Path) -> None:
    with pytest.raises(ValueError, match="vendor '../x'"):
        sim_scratch.create("../x")
    assert not list(empty_tmpdir.iterdir())


def test_a_process_that_never_closes_leaves_nothing_at_exit_and_says_so(empty_tmpdir: Path) -> None:
    code = (
        "from dra_driver import sim_scratch\n"
        "dropped = sim_scratch.create('amd'); path = dropped.path; del dropped\n"  # garbage-collected
        "assert not path.exists() and sim_scratch.abandoned_dirs() == [path]\n"
        "kept = sim_scratch.create('gaudi')\n"  # removed at interpreter exit
    )
    child = _python(code)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert err.count("simulated backend never closed") == 2
    assert not list(empty_tmpdir.iterdir())


def test_a_killed_process_dir_is_reaped_by_the_next_simulated_backend(empty_tmpdir: Path) -> None:
    code = "import os, signal\nfrom dra_driver import sim_scratch\nheld = sim_scratch.create('nvidia')\nprint(held.path, flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n"
    child = _python(code)
    out, _ = child.communicate(timeout=60)
    left = Path(out.strip())
    assert left.is_dir()  # SIGKILL: nothing could clean up
    with sim_scratch.create("nvidia") as mine:
        assert not left.exists()
        assert [p.name for p in empty_tmpdir.iterdir()] == [mine.path.name]


def test_a_live_process_dir_is_never_reaped(empty_tmpdir: Path) -> None:
    code = "import sys\nfrom dra_driver import sim_scratch\nheld = sim_scratch.create('gaudi')\nprint(held.path, flush=True)\nsys.stdin.read()\n"
    child = _python(code, stdin=subprocess.PIPE)
    try:
        assert child.stdout is not None
        theirs = Path(child.stdout.readline().strip())
        assert sim_scratch.reap_stale(empty_tmpdir) == [] and theirs.is_dir()
    finally:
        child.communicate("", timeout=60)  # it exits normally and removes its own directory
    assert not theirs.exists()


def test_a_held_lock_protects_a_dir_whose_pid_looks_dead(empty_tmpdir: Path) -> None:
    """Another PID namespace sharing the temp dir, or a reused PID: the lock decides, not the PID alone."""
    held = _fake_dir(empty_tmpdir, f"dra-nvidia-sim-{_dead_pid()}-abcdefgh")
    fd = os.open(held / sim_scratch.LOCK_NAME, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert sim_scratch.reap_stale(empty_tmpdir) == [] and held.is_dir()
    finally:
        os.close(fd)
    assert sim_scratch.reap_stale(empty_tmpdir) == [held] and not held.exists()


def test_a_dir_without_its_lock_is_reaped_only_once_old(empty_tmpdir: Path) -> None:
    pid = _dead_pid()
    young = _fake_dir(empty_tmpdir, f"dra-amd-sim-{pid}-young___", lock=False)
    old = _fake_dir(empty_tmpdir, f"dra-amd-sim-{pid}-old_____", lock=False, age_s=sim_scratch.LOCKLESS_GRACE_S + 60)
    assert sim_scratch.reap_stale(empty_tmpdir) == [old]
    assert young.is_dir() and not old.exists()


def test_only_our_own_pattern_is_reaped_and_no_link_is_followed(tmp_path: Path, empty_tmpdir: Path) -> None:
    pid = _dead_pid()
    target = tmp_path / "precious"
    target.mkdir()
    (target / "data").write_text("keep")
    link = empty_tmpdir / f"dra-nvidia-sim-{pid}-symlink_"
    link.symlink_to(target)
    inner_link = _fake_dir(empty_tmpdir, f"dra-gaudi-sim-{pid}-innerlnk", age_s=120)
    (inner_link / "sys" / "escape").symlink_to(target)
    (empty_tmpdir / f"dra-nvidia-sim-{pid}-aregular").write_text("a file, not a directory")
    others = [
        _fake_dir(empty_tmpdir, "dra-nvidia-sim-abcdefgh", age_s=120),  # an older release's name: no PID, so no way to tell
        _fake_dir(empty_tmpdir, "dra-nvidia-sysfs-abcdefgh", age_s=120),
        _fake_dir(empty_tmpdir, f"dra-nvidia-sim-{pid}-abcdefgh-x", age_s=120),
        _fake_dir(empty_tmpdir, f"xdra-nvidia-sim-{pid}-abcdefgh", age_s=120),
        _fake_dir(empty_tmpdir, f"dra-nvidia-sim-0{pid}-abcdefgh", age_s=120),
    ]
    assert sim_scratch.reap_stale(empty_tmpdir) == [inner_link]
    assert (target / "data").read_text() == "keep" and link.is_symlink()
    assert (empty_tmpdir / f"dra-nvidia-sim-{pid}-aregular").is_file()
    assert all(path.is_dir() for path in others)


def test_this_process_own_dirs_are_left_alone(empty_tmpdir: Path) -> None:
    with sim_scratch.create("nvidia") as mine:
        assert sim_scratch.reap_stale(empty_tmpdir) == [] and mine.path.is_dir()


def test_a_forked_child_leaves_its_parent_dir_alone(empty_tmpdir: Path) -> None:
    """A child inherits the finalizer and the backend: neither its exit nor its close removes the parent's dir."""
    code = (
        "import os, sys\n"
        "from dra_driver import sim_scratch\n"
        "held = sim_scratch.create('nvidia')\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    held.close()\n"
        "    sys.exit(0)\n"  # a normal exit: atexit finalizers run in the child too
        "os.waitpid(child, 0)\n"
        "assert held.path.is_dir() and (held.path / sim_scratch.LOCK_NAME).exists(), 'the child removed it'\n"
        "held.close()\n"
        "assert not held.path.exists()\n"
    )
    child = _python(code)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert not list(empty_tmpdir.iterdir())


def test_close_all_removes_this_process_dirs_and_a_half_made_one_but_not_a_held_one(empty_tmpdir: Path) -> None:
    """What a dying process's SIGTERM handler calls (dra_driver.cli.main)."""
    held = sim_scratch.create("nvidia")
    half_made = _fake_dir(empty_tmpdir, f"dra-gaudi-sim-{os.getpid()}-halfmade", lock=False)  # the signal came right after mkdtemp
    other = _fake_dir(empty_tmpdir, f"dra-amd-sim-{os.getpid()}-othernsx")  # our PID number, in another PID namespace
    fd = os.open(other / sim_scratch.LOCK_NAME, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        sim_scratch.close_all()
    finally:
        os.close(fd)
    assert held.closed and not held.path.exists() and not half_made.exists()
    assert other.is_dir()
