"""A full or read-only CDI or state directory: the claim's error names the directory and the cause, and the
failed prepare is rolled back for real (no PrepareStarted reservation left behind).

Each case runs twice: with the failure made at the lowest layer (the os calls, as the kernel answers them:
EROFS for any write or unlink in the directory, found file or not; ENOSPC when a file is created), and, where
this process may mount (root with CAP_SYS_ADMIN), on a real tmpfs mounted over the directory (read-only, or
filled up); without that permission the second form is skipped with the reason.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.node.example_backend import DRIVER

from tests.node.plugin.crash_support import DAEMON

from dra_driver.node.checkpoint import Checkpoint

HOW = ["patched", "mounted"]


def _inside(path: object, directory: Path) -> bool:
    return isinstance(path, (str, Path)) and os.fspath(path).startswith(f"{directory}/")


def patch_os(monkeypatch: pytest.MonkeyPatch, directory: Path, code: int) -> None:
    """The kernel's answers for `directory` on a read-only (EROFS) or full (ENOSPC) filesystem."""
    real_open, real_unlink, real_replace = os.open, os.unlink, os.replace
    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT

    def fail(path: object) -> OSError:
        return OSError(code, os.strerror(code), os.fspath(path))  # type: ignore[arg-type]

    def fake_open(path, flags, mode=0o777, *, dir_fd=None):  # type: ignore[no-untyped-def]
        if _inside(path, directory) and flags & writing and (code == errno.EROFS or flags & os.O_CREAT):
            raise fail(path)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def fake_unlink(path, *, dir_fd=None):  # type: ignore[no-untyped-def]
        if _inside(path, directory) and code == errno.EROFS:
            raise fail(path)  # before the name is looked up: a missing file says EROFS too
        return real_unlink(path, dir_fd=dir_fd)

    def fake_replace(src, dst, *, src_dir_fd=None, dst_dir_fd=None):  # type: ignore[no-untyped-def]
        if _inside(dst, directory) and code == errno.EROFS:
            raise fail(dst)
        return real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(os, "unlink", fake_unlink)
    monkeypatch.setattr(os, "replace", fake_replace)


def mount_tmpfs(directory: Path, options: str) -> None:
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip() or result.returncode}): the patched form covers it")


def fill(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


def umount(directory: Path) -> None:
    subprocess.run(["umount", "-l", str(directory)], check=True)


@pytest.fixture
def break_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, Path, int], Callable[[], None]]]:
    """break_dir(how, directory, errno) makes `directory` read-only or full; returns the repair."""
    mounted: list[Path] = []

    def apply(how: str, directory: Path, code: int) -> Callable[[], None]:
        if how == "patched":
            patch_os(monkeypatch, directory, code)
            return monkeypatch.undo
        mount_tmpfs(directory, "ro,mode=0755,size=64k" if code == errno.EROFS else "mode=0755,size=8k")
        mounted.append(directory)
        if code == errno.ENOSPC:
            fill(directory / "filler")

        def repair() -> None:
            umount(directory)
            mounted.remove(directory)

        return repair

    yield apply
    for directory in mounted:
        umount(directory)


def record_of(node, uid: str):  # type: ignore[no-untyped-def]
    checkpoint = Checkpoint(node.paths.checkpoint, node.settings.boot_id_path)
    checkpoint.load()
    return checkpoint.get(uid)


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize(("code", "words"), [
    (errno.EROFS, "Read-only file system (EROFS); remount it read-write or point --cdi-dir at a writable directory"),
    (errno.ENOSPC, "No space left on device (ENOSPC); free space (or inodes) on that filesystem"),
])  # fmt: skip
def test_a_cdi_dir_that_cannot_be_written_fails_the_claim_by_name_and_rolls_it_back(node, break_dir, how, code, words):
    conn = node.connect()
    first, second = node.add_claim("a", {"gpu": ["gpu-0"]}), node.add_claim("b", {"gpu": ["gpu-0"]})
    repair = break_dir(how, node.cdi_dir, code)
    error = conn.prepare([first]).claims[first.uid].error
    assert error == f"writing the CDI spec of ResourceClaim default/a: CDI directory {node.cdi_dir}: {words}; the claim was rolled back"
    assert record_of(node, first.uid) is None  # no PrepareStarted reservation left
    assert ("unprepare", {"uid": first.uid, "state": {"uid": first.uid, "devices": ["gpu-0"]}}) in node.backend.calls
    repair()
    assert conn.prepare([second]).claims[second.uid].error == ""  # the device was free again


@pytest.mark.parametrize("how", HOW)
def test_unprepare_on_a_read_only_cdi_dir_keeps_the_claim_and_says_why(node, break_dir, how):
    conn = node.connect()
    ref = node.add_claim("a", {"gpu": ["gpu-1"]})
    assert conn.prepare([ref]).claims[ref.uid].error == ""
    spec_text = (node.cdi_dir / f"k8s.{DRIVER}-device_{ref.uid}.json").read_text()
    if how == "mounted":  # a read-only filesystem that still holds the spec
        mount_tmpfs(node.cdi_dir, "mode=0755,size=64k")
        (node.cdi_dir / f"k8s.{DRIVER}-device_{ref.uid}.json").write_text(spec_text)
        subprocess.run(["mount", "-o", "remount,ro", str(node.cdi_dir)], check=True)
        repair = lambda: umount(node.cdi_dir)  # noqa: E731
    else:
        repair = break_dir(how, node.cdi_dir, errno.EROFS)
    try:
        error = conn.unprepare([ref]).claims[ref.uid].error
        assert error.startswith(f"removing the CDI spec of ResourceClaim default/a: CDI directory {node.cdi_dir}: Read-only file system (EROFS)")
        record = record_of(node, ref.uid)
        assert record is not None  # the device stays reserved while its spec is on disk
        other = node.add_claim("b", {"gpu": ["gpu-1"]})
        assert ref.uid in conn.prepare([other]).claims[other.uid].error
    finally:
        repair()
    assert conn.unprepare([ref]).claims[ref.uid].error == ""
    assert record_of(node, ref.uid) is None


@pytest.mark.parametrize("how", HOW)
def test_a_full_state_dir_fails_the_claim_by_name(node, break_dir, how):
    conn = node.connect()
    ref = node.add_claim("a", {"gpu": ["gpu-2"]})
    checkpoint = node.paths.checkpoint
    repair = break_dir(how, checkpoint, errno.ENOSPC)
    error = conn.prepare([ref]).claims[ref.uid].error
    assert error == (
        f"recording the prepare of ResourceClaim default/a: state directory {checkpoint}: "
        "No space left on device (ENOSPC); free space (or inodes) on that filesystem"
    )
    assert not any(op == "prepare" for op, _ in node.backend.calls)  # nothing was done before the record
    repair()
    assert conn.prepare([ref]).claims[ref.uid].error == ""


def test_a_daemon_killed_with_a_full_state_dir_restarts_and_serves_its_claims(short_tmp, apiserver):
    """Before, the restart wrote the registrations/ marker after the sockets served, got ENOSPC and stopped every
    driver with a raw `[Errno 28]` line: a crash loop until space was freed. Real processes, kill -9, a real full tmpfs."""
    from tests.node.conftest import make_settings
    from tests.node.plugin.crash_support import registers, start_daemon
    from tests.support import eventually
    from tests.node.conftest import paths_of, put_claim

    from dra_driver.node.plugin.kubelet_client import register

    state = short_tmp / "run"
    state.mkdir()
    mount_tmpfs(state, "mode=0755,size=256k")
    (short_tmp / "state").mkdir()
    paths = paths_of(make_settings(short_tmp))
    daemon = start_daemon(apiserver.url, short_tmp)
    restarted = None
    try:
        eventually(lambda: registers(paths), what="the daemon serves")
        kept = put_claim(apiserver, "kept", {"gpu": ["gpu-0"]})
        answer = register(paths.registration_socket).prepare([kept]).claims[kept.uid]
        assert answer.error == ""
        daemon.kill()
        daemon.wait()
        fill(state / "filler")
        restarted = subprocess.Popen([sys.executable, str(DAEMON), apiserver.url, str(short_tmp)], stderr=subprocess.PIPE, text=True)
        eventually(lambda: restarted.poll() is not None or registers(paths), what="the restarted daemon serves")
        assert restarted.poll() is None, restarted.communicate()[1][-2000:]
        conn = register(paths.registration_socket)
        again = conn.prepare([kept]).claims[kept.uid]
        assert again.error == "" and list(again.devices) == list(answer.devices)
        new = put_claim(apiserver, "new", {"gpu": ["gpu-1"]})
        refused = conn.prepare([new]).claims[new.uid].error
        assert f"state directory {paths.checkpoint}: No space left on device (ENOSPC); free space (or inodes)" in refused
        conn.close()
    finally:
        for process in (daemon, restarted):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        err = restarted.communicate(timeout=30)[1] if restarted is not None else ""
        if daemon.poll() is None:
            daemon.wait(timeout=30)
        umount(state)
    assert "[Errno 28]" not in err, [line for line in err.splitlines() if "Errno 28" in line]
    assert "cannot record this instance's registration socket" in err and f"{paths.state_root}/registrations" in err
