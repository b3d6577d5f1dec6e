"""Bad claims fail alone, with an error naming the claim and the fix; the call and the daemon survive."""

from __future__ import annotations

import grpc
import pytest
from tests.node.conftest import Node
from tests.node.example_backend import DRIVER

from dra_driver.backend.interface import ClaimRef


def _put_claim(node: Node, name: str, status: dict, namespace: str = "default") -> ClaimRef:
    stored = node.server.store.put(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": []}},
            "status": status,
        }
    )
    return ClaimRef(namespace, name, stored["metadata"]["uid"])


def test_each_bad_claim_fails_alone(node: Node):
    conn = node.connect()
    good = node.add_claim("good", {"gpu": ["gpu-0"]})
    missing = ClaimRef("default", "missing", "aaaaaaaa-0000-0000-0000-000000000000")
    unallocated = _put_claim(node, "pending", {})
    replaced = node.add_claim("replaced", {"gpu": ["gpu-1"]})
    replaced_old = ClaimRef("default", "replaced", "bbbbbbbb-0000-0000-0000-000000000000")
    bad_config = node.add_claim(
        "typo",
        {"gpu": ["gpu-2"]},
        config=[{"source": "FromClaim", "requests": [], "opaque": {"driver": DRIVER, "parameters": {"mdoe": "shared"}}}],
    )
    response = conn.prepare([good, missing, unallocated, replaced_old, bad_config])
    assert set(response.claims) == {good.uid, missing.uid, unallocated.uid, replaced_old.uid, bad_config.uid}
    assert response.claims[good.uid].error == "" and len(response.claims[good.uid].devices) == 1
    assert "default/missing not found" in response.claims[missing.uid].error
    assert "not allocated" in response.claims[unallocated.uid].error
    err = response.claims[replaced_old.uid].error
    assert replaced.uid in err and replaced_old.uid in err and "re-created" in err
    err = response.claims[bad_config.uid].error
    assert "config[0]" in err and "mdoe" in err and "default/typo" in err
    assert all(not response.claims[u].devices for u in (missing.uid, unallocated.uid, replaced_old.uid, bad_config.uid))
    # Nothing of the failed claims is left behind.
    assert sorted(p.name for p in node.cdi_dir.iterdir()) == [f".k8s.{DRIVER}-device_{good.uid}.claim", f"k8s.{DRIVER}-device_{good.uid}.json"]


def test_wrong_type_in_config_names_field(node: Node):
    ref = node.add_claim(
        "wrongtype", {"gpu": ["gpu-0"]}, config=[{"source": "FromClass", "requests": [], "opaque": {"driver": DRIVER, "parameters": {"fail": "yes"}}}]
    )
    error = node.connect().prepare([ref]).claims[ref.uid].error
    assert "'fail'" in error and "FromClass" in error


def test_parameters_must_be_an_object(node: Node):
    ref = node.add_claim(
        "notobj", {"gpu": ["gpu-0"]}, config=[{"source": "FromClaim", "requests": [], "opaque": {"driver": DRIVER, "parameters": ["x"]}}]
    )
    assert "must be a JSON object" in node.connect().prepare([ref]).claims[ref.uid].error


def test_backend_failure_is_claim_error_and_rolled_back(node: Node):
    ref = node.add_claim(
        "boom", {"gpu": ["gpu-0"]}, config=[{"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"fail": True}}}]
    )
    error = node.connect().prepare([ref]).claims[ref.uid].error
    assert "gpu-0" in error and "asked to fail" in error
    assert not any(node.cdi_dir.iterdir()) if node.cdi_dir.exists() else True
    # The device is free again for another claim.
    other = node.add_claim("after", {"gpu": ["gpu-0"]})
    assert node.connect().prepare([other]).claims[other.uid].error == ""


def test_other_drivers_results_and_configs_are_ignored(node: Node):
    ref = _put_claim(
        node,
        "mixed",
        {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-1"},
                        {"request": "nic", "driver": "nic.other.com", "pool": "node-a", "device": "eth0"},
                    ],
                    "config": [{"source": "FromClaim", "requests": [], "opaque": {"driver": "nic.other.com", "parameters": {"anything": 1}}}],
                }
            }
        },
    )
    entry = node.connect().prepare([ref]).claims[ref.uid]
    assert entry.error == "" and [d.device_name for d in entry.devices] == ["gpu-1"]


def test_claim_without_our_results_prepares_nothing(node: Node):
    ref = _put_claim(
        node, "foreign", {"allocation": {"devices": {"results": [{"request": "nic", "driver": "nic.other.com", "pool": "p", "device": "eth0"}]}}}
    )
    entry = node.connect().prepare([ref]).claims[ref.uid]
    assert entry.error == "" and len(entry.devices) == 0


def test_oversize_identifiers_fail_the_claim(node: Node):
    conn = node.connect()
    long_name = ClaimRef("default", "x" * 300, "cccccccc-0000-0000-0000-000000000000")
    empty_uid = ClaimRef("default", "c", "")
    response = conn.prepare([long_name, empty_uid])
    assert "name is 300 characters long (at most 253)" in response.claims[long_name.uid].error
    assert "uid is empty" in response.claims[""].error


def test_oversize_request_is_refused_by_grpc_and_daemon_keeps_serving(node: Node):
    conn = node.connect()
    huge = [ClaimRef("default", f"c{i}", f"{i:08d}-" + "u" * 120) for i in range(40_000)]  # > 4 MiB
    with pytest.raises(grpc.RpcError) as err:
        conn.prepare(huge)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    ref = node.add_claim("after-huge", {"gpu": ["gpu-0"]})
    assert conn.prepare([ref]).claims[ref.uid].error == ""


def test_apiserver_down_fails_claims_not_daemon(node: Node):
    conn = node.connect()
    ref = node.add_claim("outage", {"gpu": ["gpu-0"]})
    node.server.stop()
    try:
        error = conn.prepare([ref]).claims[ref.uid].error
        assert "reading ResourceClaim default/outage failed" in error
    finally:
        node.server.start()
    assert conn.prepare([ref]).claims[ref.uid].error == ""
