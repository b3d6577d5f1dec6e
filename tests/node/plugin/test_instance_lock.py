"""One instance per state directory, sockets never taken from a live server, socket paths checked first."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from tests.node.conftest import make_settings, paths_of, put_claim
from tests.hostile_paths import HOSTILE, plant, returns_within
from tests.support import eventually
from tests.node.example_backend import DRIVER, ExampleBackend

from dra_driver.node.checkpoint import PREPARE_STARTED, Checkpoint, CheckpointDevice, ClaimRecord
from dra_driver.node.daemon import Daemon
from dra_driver.kube.claims import ClaimReader
from dra_driver.node.plugin import instance_lock
from dra_driver.node.plugin.driver import PluginSettings
from dra_driver.node.plugin.instance_lock import InstanceLock, InstanceLockError
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.prepare import HOLD_ENV
from dra_driver.node.plugin.sockets import MAX_SOCKET_PATH, PluginPaths, SocketError, UnixServer
from dra_driver.backend.interface import BackendSettings


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    made: list[Daemon] = []
    yield made
    for daemon in made:
        daemon.stop()


def start(daemons: list[Daemon], apiserver, settings: PluginSettings) -> tuple[Daemon, ExampleBackend]:
    backend = ExampleBackend(BackendSettings(node_name="node-a"))
    daemon = Daemon([backend], ClaimReader(apiserver.json_api()), settings)
    daemons.append(daemon)
    daemon.start()
    return daemon, backend


def inodes(paths: PluginPaths) -> list[int]:
    return [os.lstat(path).st_ino for path in paths.sockets]


def test_a_second_instance_without_pod_uid_is_refused_and_the_first_keeps_its_claim(short_tmp, apiserver, daemons, monkeypatch):
    """Before the lock, the second start's recovery rolled back the first's in-flight claim, which the first
    then answered with CDI IDs that resolved to nothing."""
    hold = short_tmp / "hold"
    hold.mkdir()
    monkeypatch.setenv(HOLD_ENV, str(hold))
    settings = make_settings(short_tmp)
    first, first_backend = start(daemons, apiserver, settings)
    monkeypatch.delenv(HOLD_ENV)
    ref = put_claim(apiserver, "job", {"gpu": ["gpu-0"]})
    (hold / f"{ref.uid}.point").write_text("after-started")
    answer: dict[str, object] = {}
    worker = threading.Thread(target=lambda: answer.setdefault("r", register(paths_of(settings).registration_socket).prepare([ref])))
    worker.start()
    eventually((hold / ref.uid).exists, "the prepare to reach its hold point", 10, step=0.01)
    before = inodes(paths_of(settings))

    second, second_backend = start(daemons, apiserver, settings)
    assert second.status.running == []
    reason = second.status.failed[DRIVER]
    assert f"state directory {paths_of(settings).state_root} is in use by another dra-driver instance (pid {os.getpid()}" in reason
    assert "without --pod-uid" in reason and "stop the other instance" in reason
    assert second_backend.calls == []  # no recovery ran: nothing unprepared or reconciled
    second.stop()
    assert inodes(paths_of(settings)) == before  # neither bound over nor removed

    (hold / ref.uid).unlink()
    worker.join(10)
    result = answer["r"].claims[ref.uid]  # type: ignore[attr-defined]
    assert result.error == "" and result.devices
    assert (settings.cdi_dir / f"k8s.{DRIVER}-device_{ref.uid}.json").exists()
    assert [op for op, _ in first_backend.calls] == ["reconcile", "prepare"]


@pytest.mark.parametrize(("first_uid", "second_uid", "fix"), [
    (None, "pod-new", "runs without --pod-uid and does not serialize claims"),
    ("pod-old", None, "must be alone on its state directory"),
    ("pod-same", "pod-same", "same --pod-uid pod-same"),
])  # fmt: skip
def test_instances_that_cannot_share_a_state_dir_never_do(short_tmp, apiserver, daemons, first_uid, second_uid, fix):
    first, _ = start(daemons, apiserver, make_settings(short_tmp, pod_uid=first_uid))
    assert first.status.running == [DRIVER]
    second, backend = start(daemons, apiserver, make_settings(short_tmp, pod_uid=second_uid))
    assert second.status.running == []
    assert fix in second.status.failed[DRIVER]
    named = f"with --pod-uid {first_uid}" if first_uid else "without --pod-uid"
    assert f"pid {os.getpid()} on host {socket.gethostname()} {named}" in second.status.failed[DRIVER]
    assert backend.calls == []
    # The first one still serves.
    ref = put_claim(apiserver, "job", {"gpu": ["gpu-3"]})
    assert register(paths_of(make_settings(short_tmp, pod_uid=first_uid)).registration_socket).prepare([ref]).claims[ref.uid].error == ""


def test_rolling_update_instances_share_and_the_next_plain_one_starts_after_them(short_tmp, apiserver, daemons):
    old, _ = start(daemons, apiserver, make_settings(short_tmp, pod_uid="pod-old"))
    new, _ = start(daemons, apiserver, make_settings(short_tmp, pod_uid="pod-new"))
    assert old.status.running == new.status.running == [DRIVER]
    state = paths_of(make_settings(short_tmp)).state_root
    assert sorted(h.pod_uid or "" for h in instance_lock.holders(state)) == ["pod-new", "pod-old"]
    old.stop()
    new.stop()
    assert instance_lock.holders(state) == []
    plain, _ = start(daemons, apiserver, make_settings(short_tmp))
    assert plain.status.running == [DRIVER]


def test_the_refusal_is_one_line_from_run(short_tmp, apiserver, daemons):
    start(daemons, apiserver, make_settings(short_tmp))
    second = Daemon([ExampleBackend(BackendSettings(node_name="node-a"))], ClaimReader(apiserver.json_api()), make_settings(short_tmp))
    with pytest.raises(Exception) as raised:
        second.run_until_signal()
    text = str(raised.value)
    assert "\n" not in text and text.startswith(f"no driver could start: {DRIVER}: state directory ")


HOLDER = """
import sys, time
from pathlib import Path
from dra_driver.node.plugin.instance_lock import InstanceLock
InstanceLock.acquire(Path(sys.argv[1]), sys.argv[2] or None)
print("held", flush=True)
time.sleep(60)
"""


def test_holders_names_a_live_process_and_forgets_a_killed_one(tmp_path: Path):
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), "pod-a"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        [holder] = instance_lock.holders(tmp_path)
        assert (holder.pid, holder.pod_uid, holder.host) == (child.pid, "pod-a", socket.gethostname())
        with pytest.raises(InstanceLockError, match=f"pid {child.pid} .*with --pod-uid pod-a"):
            InstanceLock.acquire(tmp_path, None, wait_s=0.1)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert instance_lock.holders(tmp_path) == []  # the kernel dropped the flock with the process
    lock = InstanceLock.acquire(tmp_path, None, wait_s=0.1)
    try:
        assert sorted(p.name for p in (tmp_path / instance_lock.OWNERS_DIR).iterdir()) == ["single.lock"]  # the dead record is gone
    finally:
        lock.release()


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_pipe_or_link_among_the_lock_files_never_blocks_holders_or_a_refusal(tmp_path: Path, kind: str):
    """A FIFO at instances/<name>.lock or instance.lock hung `doctor` (holders) and a refused second instance."""
    planted = tmp_path / instance_lock.OWNERS_DIR / "planted.lock"
    plant(planted, kind)
    plant(tmp_path / instance_lock.MODE_LOCK, kind)
    assert returns_within(lambda: instance_lock.holders(tmp_path), planted) == []
    (tmp_path / instance_lock.MODE_LOCK).unlink()
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), "pod-a"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        plant(planted, kind)  # after the holder's start, which removes records no live instance holds
        refused = returns_within(lambda: pytest.raises(InstanceLockError, InstanceLock.acquire, tmp_path, None, wait_s=0.1), planted)
        assert f"pid {child.pid} " in str(refused.value) and [h.pid for h in refused.value.holders] == [child.pid]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


def test_a_probe_by_holders_never_makes_a_start_refuse(tmp_path: Path):
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            instance_lock.holders(tmp_path)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        for _ in range(50):
            InstanceLock.acquire(tmp_path, None).release()
    finally:
        stop.set()
        prober.join()


# --- sockets -------------------------------------------------------------------------------------


def _server(path: Path) -> UnixServer:
    return UnixServer(path, lambda server: None, 1, "test")


def _answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def test_stopping_never_removes_a_socket_another_server_owns_now(short_tmp: Path):
    """gRPC unlinks its socket path when it stops, whoever owns the path by then."""
    path = short_tmp / "s.sock"
    first = _server(path)
    first.start()
    os.unlink(path)  # e.g. removed by hand; a second server takes the path
    second = _server(path)
    second.start()
    try:
        first.stop(0)
        assert path.exists() and _answers(path)
    finally:
        second.stop(0)
    assert not path.exists()


def test_a_live_socket_is_never_bound_over(short_tmp: Path):
    path = short_tmp / "s.sock"
    first = _server(path)
    first.start()
    inode = os.lstat(path).st_ino
    try:
        with pytest.raises(SocketError, match="is served by a live process; stop the other driver instance"):
            _server(path).start()
        assert os.lstat(path).st_ino == inode and _answers(path)
    finally:
        first.stop(0)


def test_a_stale_socket_is_replaced(short_tmp: Path):
    path = short_tmp / "s.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens
    server = _server(path)
    server.start()
    try:
        assert _answers(path)
        assert [p.name for p in short_tmp.iterdir()] == ["s.sock"]  # no private name left behind
    finally:
        server.stop(0)


def test_two_plain_daemons_on_one_kubelet_dir_with_separate_state_dirs(short_tmp, apiserver, daemons):
    first_settings = make_settings(short_tmp)
    first, _ = start(daemons, apiserver, first_settings)
    before = inodes(paths_of(first_settings))
    second, backend = start(daemons, apiserver, dataclasses.replace(first_settings, state_dir=short_tmp / "other-state"))
    assert "is served by a live process" in second.status.failed[DRIVER]
    second.stop()
    assert inodes(paths_of(first_settings)) == before
    ref = put_claim(apiserver, "job", {"gpu": ["gpu-1"]})
    assert register(paths_of(first_settings).registration_socket).prepare([ref]).claims[ref.uid].error == ""


def _settings_with_socket_path(short_tmp: Path, size: int) -> PluginSettings:
    """Settings whose longest socket (the registration one) has exactly `size` bytes."""
    settings = make_settings(short_tmp)
    tail = len(f"/plugins_registry/{DRIVER}-reg.sock")
    kubelet_dir = short_tmp / ("k" * (size - tail - len(str(short_tmp)) - 1))
    settings = dataclasses.replace(settings, kubelet_dir=kubelet_dir)
    assert len(str(paths_of(settings).registration_socket)) == size
    return settings


def test_a_socket_path_too_long_for_grpc_is_refused_before_recovery(short_tmp, apiserver, daemons):
    settings = _settings_with_socket_path(short_tmp, MAX_SOCKET_PATH + 1)
    started = Checkpoint(paths_of(settings).checkpoint, settings.boot_id_path)
    started.put(ClaimRecord("uid-1", "default", "job", PREPARE_STARTED, [CheckpointDevice("gpu", "node-a", "gpu-0")]))
    daemon, backend = start(daemons, apiserver, settings)
    assert f"is {MAX_SOCKET_PATH + 1} bytes; gRPC binds unix sockets of at most {MAX_SOCKET_PATH}" in daemon.status.failed[DRIVER]
    assert backend.calls == []  # not rolled back: recovery never ran
    reread = Checkpoint(paths_of(settings).checkpoint, settings.boot_id_path)
    reread.load()
    assert reread.get("uid-1") is not None


def test_the_longest_socket_path_allowed_serves(short_tmp, apiserver, daemons):
    settings = _settings_with_socket_path(short_tmp, MAX_SOCKET_PATH)
    daemon, _ = start(daemons, apiserver, settings)
    assert daemon.status.running == [DRIVER]
    ref = put_claim(apiserver, "job", {"gpu": ["gpu-2"]})
    assert register(paths_of(settings).registration_socket).prepare([ref]).claims[ref.uid].error == ""


def test_grpc_refuses_one_byte_more_than_the_limit(short_tmp: Path):
    """The limit is gRPC's, not the kernel's (sun_path would take 107): fails if a gRPC upgrade changes it."""
    path = short_tmp / ("x" * (MAX_SOCKET_PATH + 1 - len(str(short_tmp)) - 1))
    server = grpc.server(ThreadPoolExecutor(max_workers=1))
    try:
        with pytest.raises(RuntimeError):
            server.add_insecure_port(f"unix://{path}")
    finally:
        server.stop(0)


def test_holders_under_a_state_dir_by_driver(short_tmp, apiserver, daemons):
    settings = make_settings(short_tmp, pod_uid="pod-a")
    daemon, _ = start(daemons, apiserver, settings)
    live = instance_lock.holders_under(settings.state_dir)
    assert list(live) == [DRIVER] and [h.pod_uid for h in live[DRIVER]] == ["pod-a"]
    daemon.stop()
    assert instance_lock.holders_under(settings.state_dir) == {}


def test_of_two_plain_instances_started_at_the_same_moment_one_serves(short_tmp, apiserver, daemons):
    made = [
        Daemon([ExampleBackend(BackendSettings(node_name="node-a"))], ClaimReader(apiserver.json_api()), make_settings(short_tmp)) for _ in range(2)
    ]
    daemons.extend(made)
    barrier = threading.Barrier(2)

    def start_now(daemon: Daemon) -> None:
        barrier.wait()
        daemon.start()

    threads = [threading.Thread(target=start_now, args=(d,)) for d in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(len(d.status.running) for d in made) == [0, 1]
    assert "is in use by another dra-driver instance" in next(d for d in made if not d.status.running).status.failed[DRIVER]


@pytest.mark.parametrize("raw", [b"{not json", b"[" * 200_000 + b"]" * 200_000, b'{"pid": "x"}', b"[]"])
def test_a_damaged_instance_record_names_an_unknown_holder(raw: bytes) -> None:
    """A record still being written or damaged (even nested past json's recursion limit) is an alive, unnamed holder."""
    from dra_driver.node.plugin.instance_lock import _parse_record

    holder = _parse_record(raw)
    assert not holder.known and holder.pod_uid is None


# --- hardening: links, deleted lock files, start races, damaged state ----------------------------


@pytest.mark.parametrize("planted", [instance_lock.MODE_LOCK, f"{instance_lock.OWNERS_DIR}/single.lock"])
def test_a_lock_file_planted_as_a_symlink_is_never_followed(tmp_path: Path, planted: str):
    """Before, the holder opened `instances/single.lock` through the link, truncated the target and wrote its pid in it."""
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    state = tmp_path / "state"
    (state / instance_lock.OWNERS_DIR).mkdir(parents=True)
    (state / planted).symlink_to(outside)
    lock = InstanceLock.acquire(state, None, wait_s=0.1)
    try:
        assert outside.read_text() == "precious\n"
        assert not (state / planted).is_symlink() and (state / planted).is_file()
        assert [h.pid for h in instance_lock.holders(state)] == [os.getpid()]
    finally:
        lock.release()
    assert outside.read_text() == "precious\n"


def test_instances_replaced_by_a_regular_file_is_refused_with_the_fix(short_tmp, apiserver, daemons):
    """Before: a raw `[Errno 17] File exists` line."""
    settings = make_settings(short_tmp)
    owners = paths_of(settings).state_root / instance_lock.OWNERS_DIR
    owners.parent.mkdir(parents=True)
    owners.write_text("")
    daemon, backend = start(daemons, apiserver, settings)
    reason = daemon.status.failed[DRIVER]
    assert reason == (f"{owners} is a regular file, not a directory: the driver keeps its instance records there; "
                      f"move it away (mv {owners} {owners}.bad) and start the driver again")  # fmt: skip
    assert backend.calls == [] and owners.is_file()


def test_the_holder_makes_deleted_lock_files_again_and_notices_a_replaced_state_dir(tmp_path: Path):
    state = tmp_path / "state"
    state.mkdir()
    lock = InstanceLock.acquire(state, "pod-a", wait_s=0.1)
    try:
        (state / instance_lock.MODE_LOCK).unlink()
        for record in (state / instance_lock.OWNERS_DIR).iterdir():
            record.unlink()
        (state / instance_lock.OWNERS_DIR).rmdir()
        assert instance_lock.live_record(state, "pod-a") is False
        assert lock.check() is None
        assert instance_lock.live_record(state, "pod-a") and [h.pod_uid for h in instance_lock.holders(state)] == ["pod-a"]
        with pytest.raises(InstanceLockError):
            InstanceLock.acquire(state, None, wait_s=0.1)
        state.rename(tmp_path / "moved")
        state.mkdir()
        problem = lock.check()
        assert problem is not None and f"state directory {state} was removed or replaced" in problem
    finally:
        lock.release()


def test_a_replaced_state_dir_makes_the_daemon_refuse_new_claims(node):
    root = node.paths.state_root
    conn = node.connect()
    kept = node.add_claim("kept", {"gpu": ["gpu-0"]})
    assert conn.prepare([kept]).claims[kept.uid].error == ""
    root.rename(root.with_name("wiped"))
    root.mkdir()
    node.daemon.recheck()
    ref = node.add_claim("new", {"gpu": ["gpu-1"]})
    assert "was removed or replaced while this instance held it" in conn.prepare([ref]).claims[ref.uid].error
    assert any("was removed or replaced" in p for p in node.daemon.readiness.check().problems[DRIVER])
    conn.close()


def _daemon_process(apiserver, root: Path, kubelet_dir: Path | None = None) -> subprocess.Popen[str]:
    from tests.node.plugin.crash_support import DAEMON

    args = [sys.executable, str(DAEMON), apiserver.url, str(root), "8"] + ([str(kubelet_dir)] if kubelet_dir else [])
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _stop(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    return err


def test_deleting_the_lock_files_under_a_live_daemon_never_lets_a_second_one_serve(short_tmp, apiserver):
    """Two real daemons, one state directory, separate kubelet dirs (so no socket stops the second). Before, with
    instance.lock and instances/ deleted, the second started and both prepared the same GPU."""
    from tests.node.plugin.crash_support import registers

    (short_tmp / "state").mkdir()
    first = _daemon_process(apiserver, short_tmp)
    second: subprocess.Popen[str] | None = None
    try:
        settings = make_settings(short_tmp)
        eventually(lambda: registers(paths_of(settings)), what="the first daemon serves")
        state = paths_of(settings).state_root
        (state / instance_lock.MODE_LOCK).unlink()
        for record in (state / instance_lock.OWNERS_DIR).iterdir():
            record.unlink()
        (state / instance_lock.OWNERS_DIR).rmdir()
        other = dataclasses.replace(settings, kubelet_dir=short_tmp / "kubelet2")
        second = _daemon_process(apiserver, short_tmp, other.kubelet_dir)
        assert second.wait(timeout=60) == 1, "the second daemon kept running"
        assert "is in use by another dra-driver instance" in _stop(second)
        assert not paths_of(other).registration_socket.exists()
        ref = put_claim(apiserver, "job", {"gpu": ["gpu-0"]})
        assert register(paths_of(settings).registration_socket).prepare([ref]).claims[ref.uid].error == ""
    finally:
        if second is not None and second.poll() is None:
            second.kill()
            second.wait()
        _stop(first)


def test_of_two_daemon_processes_started_together_the_loser_exits_at_once(short_tmp, apiserver):
    from tests.node.plugin.crash_support import registers

    (short_tmp / "state").mkdir()
    made = [_daemon_process(apiserver, short_tmp) for _ in range(2)]
    try:
        eventually(lambda: any(p.poll() is not None for p in made), timeout=60, what="one daemon exits", step=0.05)
        loser = next(p for p in made if p.poll() is not None)
        winner = next(p for p in made if p is not loser)
        assert loser.returncode == 1 and "is in use by another dra-driver instance" in _stop(loser)
        eventually(lambda: registers(paths_of(make_settings(short_tmp))), what="the winner serves")
        assert winner.poll() is None
    finally:
        for process in made:
            _stop(process)


def test_the_loser_of_a_start_race_leaves_the_winner_s_readiness_and_metrics_alone(short_tmp, apiserver, daemons, monkeypatch):
    """Before, a refused instance still served the metrics port (retried in the background, so it could take it
    from the winner) and ran a readiness monitor on the same status file, which its exit then removed."""
    from dra_driver.node import metrics_http
    from dra_driver.node.metrics_http import BindAddress
    from dra_driver.node.readiness import ReadinessReport, status_path

    monkeypatch.setattr(metrics_http, "DEFAULT_BIND_RETRY_S", 0.05)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        address = BindAddress("127.0.0.1", free.getsockname()[1])
    settings = make_settings(short_tmp)
    made = [
        Daemon([ExampleBackend(BackendSettings(node_name="node-a"))], ClaimReader(apiserver.json_api()), settings, metrics_address=address)
        for _ in range(2)
    ]
    daemons.extend(made)
    winner, loser = made
    winner.start()
    winner.readiness.check_and_record()
    status = status_path(settings.state_dir, None)
    assert loser.start().running == []
    assert loser.metrics_endpoint is None and loser.readiness.last is None
    loser.stop()
    # The winner's monitor keeps rewriting its status (so not compared byte for byte): the loser must not remove it.
    assert status.exists() and ReadinessReport.from_json(status.read_text()).problems
