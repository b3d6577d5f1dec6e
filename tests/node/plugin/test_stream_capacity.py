"""Health streams can never starve prepare/unprepare; streams of a client that died are freed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import grpc
import pytest
from tests.node.conftest import Node
from tests.node.example_backend import DRIVER

from tests.support import eventually
from dra_driver.node.plugin.health import HealthServicer

# A deadline for calls that must not queue behind streams; generous for a loaded machine, far below "blocked".
CALL_DEADLINE_S = 20.0


def _servicer(node: Node) -> HealthServicer:
    health = node.daemon.plugins[DRIVER].health
    assert health is not None
    return health


def test_extra_streams_are_refused_and_claims_still_served(node: Node):
    conn = node.connect()
    limit = node.settings.health_streams
    streams = [conn.watch_health() for _ in range(limit)]
    for stream in streams:
        assert len(next(stream).devices) == 8
    refused = []
    for _ in range(node.settings.grpc_workers + 4):  # more than the threads the claims have
        extra = conn.watch_health()
        with pytest.raises(grpc.RpcError) as err:
            next(extra)
        refused.append(err.value.code())
    assert set(refused) == {grpc.StatusCode.RESOURCE_EXHAUSTED}
    refs = [node.add_claim(f"c{i}", {"gpu": [f"gpu-{i}"]}) for i in range(6)]
    response = conn.prepare(refs, timeout=CALL_DEADLINE_S)
    assert all(response.claims[r.uid].error == "" for r in refs)
    unprepared = conn.unprepare(refs, timeout=CALL_DEADLINE_S)
    assert all(unprepared.claims[r.uid].error == "" for r in refs)
    # The open streams still work, and a cancelled one gives its slot back.
    streams[0].cancel()
    eventually(lambda: _servicer(node).slots.open == limit - 1, "open slots == limit - 1")
    replacement = conn.watch_health()
    assert len(next(replacement).devices) == 8
    for stream in [*streams[1:], replacement]:
        stream.cancel()
    eventually(lambda: _servicer(node).slots.open == 0, "open slots == 0")


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from dra_driver.node.plugin.kubelet_client import register
    conn = register(Path(sys.argv[1]))
    streams = [conn.watch_health() for _ in range(int(sys.argv[2]))]
    for stream in streams:
        next(stream)
    print("open", flush=True)
    time.sleep(600)
    """
)


def test_streams_of_a_killed_client_are_freed_at_once(node: Node):
    limit = node.settings.health_streams
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(node.paths.registration_socket), str(limit)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        assert _servicer(node).slots.open == limit
        conn = node.connect()
        with pytest.raises(grpc.RpcError) as err:
            next(conn.watch_health())
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
        # Freed by the termination callback, well before the next 10 s re-send would have noticed.
        eventually(lambda: _servicer(node).slots.open == 0, "open slots == 0")
        stream = conn.watch_health()
        assert len(next(stream).devices) == 8
        ref = node.add_claim("after-kill", {"gpu": ["gpu-0"]})
        assert conn.prepare([ref], timeout=CALL_DEADLINE_S).claims[ref.uid].error == ""
        stream.cancel()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)


def test_refusals_are_logged_once_a_minute_not_per_try(node: Node, caplog: pytest.LogCaptureFixture):
    conn = node.connect()
    streams = [conn.watch_health() for _ in range(node.settings.health_streams)]
    for stream in streams:
        next(stream)
    with caplog.at_level("WARNING", logger="dra_driver.node.plugin.health"):
        for _ in range(10):
            with pytest.raises(grpc.RpcError):
                next(conn.watch_health())
    assert len([r for r in caplog.records if "health stream refused" in r.getMessage()]) == 1
    for stream in streams:
        stream.cancel()
