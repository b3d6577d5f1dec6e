"""Same claim serialized, different claims in parallel, device conflicts refused."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from tests.node.conftest import Node
from tests.node.example_backend import DRIVER

from dra_driver.node import checkpoint as checkpoint_module
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.backend.interface import ClaimRef


def test_same_claim_concurrently_prepares_once(node: Node):
    conn = node.connect()
    ref = node.add_claim("shared-pod-claim", {"gpu": ["gpu-0", "gpu-1"]})
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda _: conn.prepare([ref]), range(8)))
    assert all(r == responses[0] for r in responses)
    assert responses[0].claims[ref.uid].error == ""
    assert [op for op, _ in node.backend.calls].count("prepare") == 1


def test_different_claims_run_in_parallel(node: Node):
    """Two claims in one request overlap inside the backend (a barrier both must reach)."""
    barrier = threading.Barrier(2, timeout=5)
    original = node.backend.prepare

    def slow_prepare(claim, devices):
        barrier.wait()  # raises BrokenBarrierError if the two claims were serialized
        return original(claim, devices)

    node.backend.prepare = slow_prepare  # type: ignore[method-assign]
    a = node.add_claim("a", {"gpu": ["gpu-0"]})
    b = node.add_claim("b", {"gpu": ["gpu-1"]})
    response = node.connect().prepare([a, b])
    assert response.claims[a.uid].error == "" and response.claims[b.uid].error == ""


def test_device_held_by_one_claim_is_refused_to_another(node: Node):
    conn = node.connect()
    first = node.add_claim("first", {"gpu": ["gpu-4"]})
    second = node.add_claim("second", {"gpu": ["gpu-4", "gpu-5"]})
    assert conn.prepare([first]).claims[first.uid].error == ""
    error = conn.prepare([second]).claims[second.uid].error
    assert "node-a/gpu-4" in error and "default/first" in error
    assert [op for op, _ in node.backend.calls].count("prepare") == 1
    conn.unprepare([first])
    assert conn.prepare([second]).claims[second.uid].error == ""


def test_racing_claims_for_one_device_one_wins(node: Node):
    conn = node.connect()
    refs = [node.add_claim(f"race-{i}", {"gpu": ["gpu-7"]}) for i in range(6)]
    with ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(lambda r: conn.prepare([r]).claims[r.uid], refs))
    assert sum(1 for r in responses if r.error == "") == 1


def test_admin_access_may_share_a_device(node: Node):
    conn = node.connect()
    owner = node.add_claim("owner", {"gpu": ["gpu-3"]})
    stored = node.server.store.put(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "monitor", "namespace": "ops"},
            "spec": {"devices": {"requests": []}},
            "status": {
                "allocation": {
                    "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-3", "adminAccess": True}]}
                }
            },
        }
    )
    from dra_driver.backend.interface import ClaimRef

    monitor = ClaimRef("ops", "monitor", stored["metadata"]["uid"])
    assert conn.prepare([owner]).claims[owner.uid].error == ""
    assert conn.prepare([monitor]).claims[monitor.uid].error == ""


def test_per_uid_locks_are_released(node: Node):
    conn = node.connect()
    refs = [node.add_claim(f"l{i}", {"gpu": [f"gpu-{i}"]}) for i in range(4)]
    conn.prepare(refs)
    conn.unprepare(refs)
    time.sleep(0.05)
    assert len(node.daemon.plugins[DRIVER].service._uid_locks) == 0


def test_failed_prepare_started_write_fails_the_claim_and_frees_its_devices(node: Node, monkeypatch):
    conn = node.connect()
    first = node.add_claim("disk-full", {"gpu": ["gpu-2"]})
    second = node.add_claim("after", {"gpu": ["gpu-2"]})
    real = checkpoint_module._append_file

    def full_disk(path, data, durable) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint_module, "_append_file", full_disk)
    error = conn.prepare([first]).claims[first.uid].error
    assert "No space left on device" in error
    assert "prepare" not in [op for op, _ in node.backend.calls]  # the backend never acted
    monkeypatch.setattr(checkpoint_module, "_append_file", real)
    assert conn.prepare([second]).claims[second.uid].error == ""  # gpu-2 was not left reserved


def test_exclusive_claim_is_refused_even_when_an_admin_claim_also_holds_the_device(node: Node):
    conn = node.connect()
    exclusive = node.add_claim("exclusive", {"gpu": ["gpu-6"]})
    assert conn.prepare([exclusive]).claims[exclusive.uid].error == ""
    admin_body = allocated_claim_object("admin", "default", DRIVER, "node-a", {"gpu": ["gpu-6"]})
    admin_body["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    stored = node.server.store.put(admin_body)
    admin = ClaimRef("default", "admin", stored["metadata"]["uid"])
    assert conn.prepare([admin]).claims[admin.uid].error == ""  # adminAccess may share
    other = node.add_claim("other", {"gpu": ["gpu-6"]})
    error = conn.prepare([other]).claims[other.uid].error
    assert "default/exclusive" in error  # every holder is checked, not just one of them
