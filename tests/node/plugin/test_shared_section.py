"""SharedSection: the cross-instance checkpoint lock and its change stamp."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from dra_driver.node.plugin.locks import SharedSection


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def test_first_entry_reloads_then_own_sections_do_not(tmp_path: Path) -> None:
    reload = Counter()
    section = SharedSection(tmp_path / "serialize.lock", reload)
    for _ in range(5):
        with section.hold():
            pass
    assert reload.calls == 1
    section.close()


def test_another_instance_entering_forces_a_reload(tmp_path: Path) -> None:
    reload_a, reload_b = Counter(), Counter()
    a = SharedSection(tmp_path / "serialize.lock", reload_a)
    b = SharedSection(tmp_path / "serialize.lock", reload_b)
    with a.hold():
        pass
    with b.hold():  # first entry of b, and a held it since b never did
        pass
    with a.hold():  # b held it in between: a must re-read
        pass
    with a.hold():  # nobody else since: no re-read
        pass
    assert (reload_a.calls, reload_b.calls) == (2, 1)
    a.close()
    b.close()


def test_failed_reload_is_retried_on_the_next_entry(tmp_path: Path) -> None:
    calls: list[int] = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("disk hiccup")

    section = SharedSection(tmp_path / "serialize.lock", flaky)
    try:
        with section.hold():
            raise AssertionError("the body must not run when the reload failed")
    except OSError:
        pass
    with section.hold():
        pass
    assert len(calls) == 2
    section.close()


def test_threads_of_one_instance_exclude_each_other(tmp_path: Path) -> None:
    section = SharedSection(tmp_path / "serialize.lock", Counter())
    inside = 0
    overlap = False
    guard = threading.Lock()

    def work() -> None:
        nonlocal inside, overlap
        for _ in range(50):
            with section.hold():
                with guard:
                    inside += 1
                    overlap = overlap or inside > 1
                time.sleep(0.0002)
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not overlap
    section.close()


def test_excludes_another_process(tmp_path: Path) -> None:
    path = tmp_path / "serialize.lock"
    released = tmp_path / "released"  # written by this process just before it lets go of the section
    section = SharedSection(path, Counter())
    child = (
        "import fcntl, os\n"
        f"fd = os.open({str(path)!r}, os.O_RDWR)\n"
        "print('ready', flush=True)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        f"print(os.path.exists({str(released)!r}))\n"
    )
    with section.hold():
        proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        # Wait for the child to reach its flock: interpreter start-up on a loaded machine
        # can take longer than any fixed sleep.
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        assert proc.poll() is None  # still waiting for our lock
        released.touch()
    out, _ = proc.communicate(timeout=10)
    assert out.strip() == "True"  # the child got the lock only after this process released it
    section.close()


def test_a_deleted_lock_file_is_recreated_and_locked(tmp_path: Path) -> None:
    path = tmp_path / "serialize.lock"
    section = SharedSection(path, Counter())
    with section.hold():
        pass
    os.unlink(path)
    with section.hold():
        assert path.exists()
        held_inode = os.stat(path).st_ino
    # the section now locks the file others will open, not the deleted one
    other = SharedSection(path, Counter())
    with other.hold():
        assert os.stat(path).st_ino == held_inode
    section.close()
    other.close()
