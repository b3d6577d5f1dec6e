"""CDI layout per request: set-wide edits reach only the containers of that request; names never repeat."""

from __future__ import annotations

import json

import pytest
from tests.node.conftest import Node
from tests.node.example_backend import DRIVER

from dra_driver.node import cdi
from dra_driver.backend.interface import ClaimRef, ContainerEdits


def resolve_env(spec: dict, cdi_ids: list[str]) -> dict[str, str]:
    """What a CDI runtime injects for these IDs: spec-level edits plus each named device's edits."""
    by_name = {d["name"]: d for d in spec["devices"]}
    env = list(spec.get("containerEdits", {}).get("env", []))
    for cdi_id in dict.fromkeys(cdi_ids):
        kind, _, name = cdi_id.partition("=")
        assert kind == spec["kind"]
        env += by_name[name]["containerEdits"].get("env", [])
    return dict(e.split("=", 1) for e in env)


def spec_of(node: Node, uid: str) -> dict:
    return json.loads((node.cdi_dir / f"k8s.{DRIVER}-device_{uid}.json").read_text())


def test_each_request_sees_only_its_own_device_set(node: Node):
    ref = node.add_claim("two-requests", {"train": ["gpu-0", "gpu-1"], "infer": ["gpu-4"]})
    entry = node.connect().prepare([ref]).claims[ref.uid]
    assert entry.error == ""
    spec = spec_of(node, ref.uid)
    by_request: dict[str, list[str]] = {}
    for device in entry.devices:
        by_request.setdefault(device.request_names[0], []).extend(device.cdi_device_ids)
    assert resolve_env(spec, by_request["train"])["EXAMPLE_REQUEST_DEVICES"] == "gpu-0,gpu-1"
    assert resolve_env(spec, by_request["infer"])["EXAMPLE_REQUEST_DEVICES"] == "gpu-4"
    # A single device of a request brings the whole set of that request (and only it).
    one = next(d for d in entry.devices if d.device_name == "gpu-1")
    assert resolve_env(spec, list(one.cdi_device_ids))["EXAMPLE_REQUEST_DEVICES"] == "gpu-0,gpu-1"
    # Claim-wide edits stay at spec level.
    assert spec["containerEdits"]["env"] == ["EXAMPLE_VISIBLE_DEVICES=gpu-0,gpu-1,gpu-4"]
    # The checkpoint answers a repeated call with the same IDs.
    again = node.connect().prepare([ref]).claims[ref.uid]
    assert [list(d.cdi_device_ids) for d in again.devices] == [list(d.cdi_device_ids) for d in entry.devices]


def test_same_device_in_two_results_gives_unique_cdi_names(node: Node):
    results = [
        {"request": "a", "driver": DRIVER, "pool": "node-a", "device": "gpu-2", "adminAccess": True},
        {"request": "b", "driver": DRIVER, "pool": "node-a", "device": "gpu-2", "adminAccess": True},
    ]
    stored = node.server.store.put(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "monitor", "namespace": "ops"},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    )
    ref = ClaimRef("ops", "monitor", stored["metadata"]["uid"])
    entry = node.connect().prepare([ref]).claims[ref.uid]
    assert entry.error == ""
    names = [d["name"] for d in spec_of(node, ref.uid)["devices"]]
    assert len(names) == len(set(names))
    assert len(entry.devices) == 2 and entry.devices[0].cdi_device_ids[0] == entry.devices[1].cdi_device_ids[0]


def test_device_names_include_the_pool():
    assert cdi.cdi_device_name("u", "pool-a", "gpu-0") != cdi.cdi_device_name("u", "pool-b", "gpu-0")
    assert cdi.cdi_device_name("u", "node/pool", "gpu-0") == "u-node_pool-gpu-0"


def test_spec_with_duplicate_names_is_refused():
    dev = cdi.SpecDevice("u-p-gpu-0", "gpu-0", ContainerEdits(env=["A=1"]))
    with pytest.raises(ValueError, match="u-p-gpu-0"):
        cdi.build_claim_spec(DRIVER, [dev, dev], ContainerEdits())
