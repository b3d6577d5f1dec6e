"""Hostile claims over the real socket: each fails alone with its own error; files outside the CDI dir are never touched."""

from __future__ import annotations

from typing import Any

import pytest
from tests.node.conftest import Node
from tests.node.example_backend import DRIVER

from dra_driver.node.plugin.claim_checks import MAX_ERROR_BYTES
from dra_driver.node.plugin.prepare import PrepareService
from dra_driver.backend.interface import ClaimRef

SHARE = "4f1c2d3e-0000-4000-8000-000000000001"


def _claim_with_results(node: Node, name: str, results: list[dict[str, Any]], config: list[dict[str, Any]] | None = None) -> ClaimRef:
    stored = node.server.store.put(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": results, "config": config or []}}},
        }
    )
    return ClaimRef("default", name, stored["metadata"]["uid"])


def _result(**changed: Any) -> dict[str, Any]:
    return {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-0", **changed}


def _service(node: Node) -> PrepareService:
    return node.daemon.plugins[DRIVER].service


@pytest.mark.parametrize(
    ("result", "field"),
    [
        (_result(pool="node-b"), "pool"),
        (_result(pool=""), "pool"),
        (_result(pool="../../etc"), "pool"),
        (_result(pool="node-a\x00"), "pool"),
        (_result(pool="nöde-a"), "pool"),
        (_result(pool="p" * 300), "pool"),
        (_result(device="../../../victim"), "device"),
        (_result(device="GPU-0"), "device"),
        (_result(device=""), "device"),
        (_result(request="../x"), "request"),
        (_result(request="gpu/a/b"), "request"),
        (_result(shareID="../../../../victim"), "shareID"),
        (_result(shareID=SHARE.upper()), "shareID"),
    ],
)
def test_bad_result_fails_its_claim_and_nothing_is_written(node: Node, result: dict[str, Any], field: str):
    good = node.add_claim("good", {"gpu": ["gpu-1"]})
    bad = _claim_with_results(node, "bad", [result])
    response = node.connect().prepare([bad, good])
    assert response.claims[good.uid].error == "" and len(response.claims[good.uid].devices) == 1
    error = response.claims[bad.uid].error
    assert f"status.allocation.devices.results[0].{field}" in error and "default/bad" in error
    assert not response.claims[bad.uid].devices
    assert sorted(p.name for p in node.cdi_dir.iterdir()) == [f".k8s.{DRIVER}-device_{good.uid}.claim", f"k8s.{DRIVER}-device_{good.uid}.json"]
    assert _service(node).checkpoint_record(bad.uid) is None
    assert not [data for op, data in node.backend.calls if op == "prepare" and data["uid"] == bad.uid]
    assert not [p for p in node.root.rglob("*") if "victim" in p.name or p.name == "etc"]


def test_a_device_held_in_our_pool_is_not_prepared_again_through_another_pool(node: Node):
    conn = node.connect()
    holder = node.add_claim("holder", {"gpu": ["gpu-0"]})
    assert conn.prepare([holder]).claims[holder.uid].error == ""
    thief = _claim_with_results(node, "thief", [_result(pool="node-b")])
    error = conn.prepare([thief]).claims[thief.uid].error
    assert "'node-b' is not a pool of this node" in error
    assert _service(node).checkpoint_record(thief.uid) is None
    assert _service(node).prepared_device_count() == 1


@pytest.mark.parametrize(
    "results",
    [
        [_result(), _result(request="b")],
        [_result(), _result(request="b", shareID=SHARE)],
        [_result(shareID=SHARE), _result(request="b", shareID=SHARE)],
    ],
)
def test_same_device_twice_in_one_claim_is_refused(node: Node, results: list[dict[str, Any]]):
    ref = _claim_with_results(node, "twice", results)
    error = node.connect().prepare([ref]).claims[ref.uid].error
    assert "more than once" in error and "results[0]" in error and "results[1]" in error
    assert _service(node).checkpoint_record(ref.uid) is None


def test_same_device_twice_with_admin_access_or_distinct_shares_is_fine(node: Node):
    admin = _claim_with_results(node, "admin", [_result(adminAccess=True), _result(request="b", adminAccess=True)])
    shares = _claim_with_results(
        node, "shares", [_result(device="gpu-1", shareID=SHARE), _result(device="gpu-1", request="b", shareID="4f1c2d3e-0000-4000-8000-000000000002")]
    )
    response = node.connect().prepare([admin, shares])
    assert response.claims[admin.uid].error == "" and response.claims[shares.uid].error == ""
    assert len(response.claims[shares.uid].devices) == 2


@pytest.mark.parametrize(
    "ref",
    [
        ClaimRef("default", "c", "../../victim"),
        ClaimRef("default", "c", "a\x00b"),
        ClaimRef("default", "c", "é" * 10),
        ClaimRef("default", "c", "u" * 5000),
        ClaimRef("../..", "c", "4d1c6e0a-7a0e-4a43-9b0e-3b8c5a1f0c11"),
        ClaimRef("default", "../c", "4d1c6e0a-7a0e-4a43-9b0e-3b8c5a1f0c12"),
    ],
    ids=lambda r: ascii(f"{r.namespace}|{r.name}|{r.uid}"[:40]),
)
def test_unprepare_of_an_invalid_reference_is_its_error_never_a_file_operation(node: Node, ref: ClaimRef):
    # The layout the old traversal needed: a directory named like a spec-file prefix, a victim beside the CDI dir.
    node.cdi_dir.mkdir(exist_ok=True)
    (node.cdi_dir / f"k8s.{DRIVER}-device_..").mkdir()
    victim = node.root / "victim.json"
    victim.write_text("{}")
    good = node.add_claim("good", {"gpu": ["gpu-0"]})
    conn = node.connect()
    assert conn.prepare([good]).claims[good.uid].error == ""
    response = conn.unprepare([ref, good])
    assert set(response.claims) == {ref.uid, good.uid}
    assert "invalid claim reference" in response.claims[ref.uid].error
    assert len(response.claims[ref.uid].error.encode()) <= MAX_ERROR_BYTES
    assert response.claims[good.uid].error == ""
    assert victim.read_text() == "{}"
    assert _service(node).prepared_device_count() == 0


def test_prepare_of_a_traversal_uid_touches_nothing(node: Node):
    victim = node.root / "victim.json"
    victim.write_text("{}")
    ref = ClaimRef("default", "c", "../../victim")
    error = node.connect().prepare([ref]).claims[ref.uid].error
    assert "claim uid" in error
    assert victim.read_text() == "{}"
    assert node.server.requests[("get", "resourceclaims")] == 0  # refused before asking the API server


def test_huge_config_value_is_bounded_and_fails_only_its_claim(node: Node):
    """A 5 MB key in the opaque config is echoed by validation; the answer must still fit the kubelet's 4 MiB."""
    huge = {"source": "FromClaim", "requests": [], "opaque": {"driver": DRIVER, "parameters": {"k" * 5_000_000: True}}}
    hostile = [node.add_claim(f"huge-{i}", {"gpu": [f"gpu-{i}"]}, config=[huge]) for i in range(2)]
    good = [node.add_claim(f"good-{i}", {"gpu": [f"gpu-{i + 4}"]}) for i in range(3)]
    response = node.connect().prepare([hostile[0], *good, hostile[1]])
    assert len(response.claims) == 5
    for ref in hostile:
        error = response.claims[ref.uid].error
        assert "config[0]" in error and "truncated" in error
        assert len(error.encode()) <= MAX_ERROR_BYTES
    assert all(response.claims[ref.uid].error == "" and response.claims[ref.uid].devices for ref in good)
