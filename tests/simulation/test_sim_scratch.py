"""Scratch directories of simulated backends: named per process, removed on close, reaped only when their owner is dead."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dra_driver.simulation import scratch as sim_scratch


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
        "from dra_driver.simulation import scratch as sim_scratch\n"
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
    code = (
        "import os, signal\nfrom dra_driver.simulation import scratch as sim_scratch\n"
        "held = sim_scratch.create('nvidia')\nprint(held.path, flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n"
    )
    child = _python(code)
    out, _ = child.communicate(timeout=60)
    left = Path(out.strip())
    assert left.is_dir()  # SIGKILL: nothing could clean up
    with sim_scratch.create("nvidia") as mine:
        assert not left.exists()
        assert [p.name for p in empty_tmpdir.iterdir()] == [mine.path.name]


def test_a_live_process_dir_is_never_reaped(empty_tmpdir: Path) -> None:
    code = (
        "import sys\nfrom dra_driver.simulation import scratch as sim_scratch\n"
        "held = sim_scratch.create('gaudi')\nprint(held.path, flush=True)\nsys.stdin.read()\n"
    )
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
        "from dra_driver.simulation import scratch as sim_scratch\n"
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


def test_close_all_removes_this_process_dirs_but_none_it_did_not_make(empty_tmpdir: Path) -> None:
    """What a dying process's SIGTERM handler calls (dra_driver.cli.main); a signal half-way through create or close:
    test_sigterm_at_any_point_of_create_or_close_removes_the_dir_and_dies_of_the_signal."""
    held = sim_scratch.create("nvidia")
    other = _fake_dir(empty_tmpdir, f"dra-amd-sim-{os.getpid()}-othernsx")  # our PID number, in another PID namespace
    unlocked = _fake_dir(empty_tmpdir, f".dra-gaudi-sim-{os.getpid()}-othernsy", lock=False)  # that one, before its flock
    fd = os.open(other / sim_scratch.LOCK_NAME, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        sim_scratch.close_all()
    finally:
        os.close(fd)
    assert held.closed and not held.path.exists()
    assert other.is_dir() and unlocked.is_dir()


# Runs in a fresh single-threaded interpreter: forks one child per step; the child creates and closes a scratch dir
# under `directory` and, at the step-th bytecode it executes in sim_scratch.py, gets SIGTERM (the one-shot
# commands' handler installed) or SIGKILL. Prints, as JSON, the steps whose outcome was wrong.
_EVERY_STEP = """
import json, os, shutil, signal, sys
from pathlib import Path
from dra_driver.simulation import scratch as sim_scratch
from dra_driver.cli.main import _remove_scratch_and_die

signum, directory = getattr(signal, sys.argv[1]), Path(sys.argv[2])

def child(step):
    signal.signal(signal.SIGTERM, _remove_scratch_and_die)
    count = 0
    def opcode(frame, event, arg):
        nonlocal count
        if event == "opcode":
            count += 1
            if count == step:
                sys.settrace(None)
                os.kill(os.getpid(), signum)
        return opcode
    def call(frame, event, arg):
        if frame.f_code.co_filename != sim_scratch.__file__:
            return None
        frame.f_trace_opcodes = True
        return opcode
    try:
        sys.settrace(call)
        sim_scratch.create("gaudi", directory).close()
        sys.settrace(None)
    except BaseException as exc:
        os.write(2, repr(exc).encode())
        os._exit(2)
    os._exit(0 if count < step else 1)  # 0: the step was never reached, every step has been tried

wrong = []
for step in range(1, 10_000):
    pid = os.fork()
    if pid == 0:
        child(step)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code == 0:
        break
    if signum == signal.SIGKILL:
        sim_scratch.reap_stale(directory)  # what the next simulated backend does first
    left = sorted(os.listdir(directory))
    # SIGTERM: nothing. SIGKILL: at most a hidden dir without its lock file, killed between mkdir and flock.
    kept = [name for name in left if signum == signal.SIGTERM or name.startswith("dra-") or os.path.lexists(directory / name / ".owner")]
    if code != -signum or kept:
        wrong.append({"step": step, "exit": code, "left": left})
    for name in left:
        shutil.rmtree(directory / name)
print(json.dumps({"steps": step - 1, "wrong": wrong}))
"""


def _signal_at_every_step(signum: signal.Signals, directory: Path) -> tuple[int, list[dict[str, object]]]:
    child = subprocess.run([sys.executable, "-c", _EVERY_STEP, signum.name, str(directory)], capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
    return result["steps"], result["wrong"]


def test_sigterm_at_any_point_of_create_or_close_removes_the_dir_and_dies_of_the_signal(empty_tmpdir: Path) -> None:
    """The handler runs between any two bytecodes: right after the mkdir, with the lock held but the dir not handed
    over, half-way through __init__, or while close removes it (lock still held by this process)."""
    steps, wrong = _signal_at_every_step(signal.SIGTERM, empty_tmpdir)
    assert steps > 50  # the child really ran create and close under the tracer
    assert wrong == []


def test_sigkill_at_any_point_of_create_or_close_leaves_nothing_the_next_reap_keeps_under_a_visible_name(empty_tmpdir: Path) -> None:
    """A dir under its final name (what `ls` and a test waiting for "every backend is open" see) is always held by a
    live owner or reaped at once: only a hidden one killed between its mkdir and its lock file waits out the grace."""
    steps, wrong = _signal_at_every_step(signal.SIGKILL, empty_tmpdir)
    assert steps > 50
    assert wrong == []
