"""A slow API server never costs the kubelet its answer: every claim is answered before the call's deadline."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from tests.node.conftest import Node
from tests.node.example_backend import DRIVER
from tests.support import eventually

from dra_driver.kube.claims import ClaimLookupError, ClaimReader
from dra_driver.simulation.api_server import SimApiServer
from dra_driver.node.plugin.servicers import ANSWER_MARGIN_S, answer_deadline

SHORT_DEADLINE_S = 2.0  # the test's stand-in for the kubelet's 45 s
SLOW_S = 4.0  # the API server's delay: longer than the deadline


def _claims(node: Node, count: int, prefix: str = "c") -> list[Any]:
    return [node.add_claim(f"{prefix}{i}", {"gpu": [f"gpu-{i % 8}"]}) for i in range(count)]


def test_slow_api_server_every_claim_answered_before_the_deadline(node: Node):
    refs = _claims(node, 8)  # more than the prepare workers (4): some wait in the queue
    node.server.slow("get", "resourceclaims", SLOW_S)
    conn = node.connect()
    response = conn.prepare(refs, timeout=SHORT_DEADLINE_S)  # a DEADLINE_EXCEEDED here would raise
    assert set(response.claims) == {r.uid for r in refs}
    for ref in refs:
        error = response.claims[ref.uid].error
        assert "deadline" in error and not response.claims[ref.uid].devices
    # Once the API server is quick again, the kubelet's retry prepares them all: nothing half-done is left.
    node.server.clear_faults()
    retry = conn.prepare(refs, timeout=30)
    assert all(retry.claims[r.uid].error == "" for r in refs)
    _let_background_work_end(node)


def test_only_the_slow_claims_fail(node: Node):
    refs = _claims(node, 4)
    node.server.slow("get", "resourceclaims", SLOW_S, count=2)  # the first two GETs to arrive are slow
    response = node.connect().prepare(refs, timeout=SHORT_DEADLINE_S)
    errors = [response.claims[r.uid].error for r in refs]
    assert sum(1 for e in errors if e) == 2
    assert all("deadline" in e for e in errors if e)
    assert sum(1 for r in refs if len(response.claims[r.uid].devices) == 1) == 2
    node.server.clear_faults()
    retry = node.connect().prepare(refs, timeout=30)  # the kubelet's retry gets them all
    assert all(retry.claims[r.uid].error == "" for r in refs)
    _let_background_work_end(node)


def _let_background_work_end(node: Node) -> None:
    """Claims answered with a deadline error may still be logging in the background: stop the daemon (it waits
    for them) inside the test, before pytest swaps its log capture for teardown."""
    node.daemon.stop()


def test_unprepare_waiting_behind_a_slow_prepare_of_its_claim_is_answered(node: Node):
    slow_ref, other = _claims(node, 2)
    conn = node.connect()
    assert conn.prepare([other]).claims[other.uid].error == ""
    node.server.slow("get", "resourceclaims", SLOW_S, count=1)
    gets_before = node.server.requests[("get", "resourceclaims")]  # other's prepare already sent one
    pending = threading.Thread(target=lambda: conn.prepare([slow_ref], timeout=30))
    pending.start()
    try:
        assert _wait_for_request(node.server, after=gets_before)  # the slow prepare holds its claim now
        response = conn.unprepare([slow_ref, other], timeout=SHORT_DEADLINE_S)
        assert response.claims[other.uid].error == ""
        assert "deadline" in response.claims[slow_ref.uid].error
    finally:
        pending.join(30)


def _wait_for_request(server: SimApiServer, after: int = 0) -> bool:
    return eventually(lambda: server.requests[("get", "resourceclaims")] > after, f"more than {after} GETs of a claim", 10, step=0.01)


# --- the reader: no blind retries, the deadline bounds everything ------------------------------


@pytest.fixture
def stored(apiserver: SimApiServer) -> tuple[ClaimReader, str]:
    from dra_driver.simulation.claims import allocated_claim_object

    apiserver.store.put(allocated_claim_object("c", "default", DRIVER, "node-a", {"gpu": ["gpu-0"]}))
    return ClaimReader(apiserver.json_api(), timeout_s=0.5), "c"


def test_slow_get_is_tried_once_within_the_deadline(apiserver: SimApiServer, stored: tuple[ClaimReader, str]):
    reader, name = stored
    apiserver.slow("get", "resourceclaims", SLOW_S)
    with pytest.raises(ClaimLookupError, match="did not finish before the kubelet's deadline"):
        reader.get("default", name, deadline=time.monotonic() + 1.0)
    assert apiserver.requests[("get", "resourceclaims")] == 1  # urllib3 did not repeat it


def test_slow_get_without_deadline_uses_the_reader_timeout_once(apiserver: SimApiServer, stored: tuple[ClaimReader, str]):
    reader, name = stored
    apiserver.slow("get", "resourceclaims", SLOW_S)
    with pytest.raises(ClaimLookupError, match="timed out: the API server did not answer within 0.5 s"):
        reader.get("default", name)
    assert apiserver.requests[("get", "resourceclaims")] == 1


def test_expired_deadline_sends_nothing(apiserver: SimApiServer, stored: tuple[ClaimReader, str]):
    reader, name = stored
    with pytest.raises(ClaimLookupError, match="did not start before the kubelet's deadline"):
        reader.get("default", name, deadline=time.monotonic() - 1)
    assert apiserver.requests[("get", "resourceclaims")] == 0


def test_a_dropped_connection_is_tried_again(apiserver: SimApiServer, stored: tuple[ClaimReader, str]):
    reader, name = stored
    apiserver.inject("get", "resourceclaims", 0, count=2)  # two answers lost, the third arrives
    claim = reader.get("default", name, deadline=time.monotonic() + 10)
    assert claim.metadata.name == name
    assert apiserver.requests[("get", "resourceclaims")] == 3


def test_slow_answer_within_the_deadline_is_waited_for(apiserver: SimApiServer, stored: tuple[ClaimReader, str]):
    """With a deadline, the reader waits as long as the caller can: a 0.8 s answer is not cut at the 0.5 s default."""
    reader, name = stored
    apiserver.slow("get", "resourceclaims", 0.8, count=1)
    assert reader.get("default", name, deadline=time.monotonic() + 10).metadata.name == name


class _Context:
    def __init__(self, remaining: float | None) -> None:
        self.remaining = remaining

    def time_remaining(self) -> float | None:
        return self.remaining


def test_answer_deadline_keeps_a_margin():
    assert answer_deadline(_Context(None)) is None  # type: ignore[arg-type]
    assert answer_deadline(_Context(1e10)) is None  # type: ignore[arg-type]  # what grpc reports without a deadline
    now = time.monotonic()
    deadline = answer_deadline(_Context(45.0))  # type: ignore[arg-type]
    assert deadline is not None and now + 45.0 - ANSWER_MARGIN_S - 0.5 <= deadline <= time.monotonic() + 45.0 - ANSWER_MARGIN_S
    short = answer_deadline(_Context(2.0))  # type: ignore[arg-type]
    assert short is not None and short <= time.monotonic() + 1.8


def test_call_without_deadline_still_works(node: Node):
    ref = node.add_claim("nodeadline", {"gpu": ["gpu-0"]})
    conn = node.connect()
    request = conn.pb2.NodePrepareResourcesRequest(claims=[conn.pb2.Claim(namespace=ref.namespace, uid=ref.uid, name=ref.name)])
    response = conn.stub.NodePrepareResources(request)  # no timeout at all
    assert response.claims[ref.uid].error == ""
