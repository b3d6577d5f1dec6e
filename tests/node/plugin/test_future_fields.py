"""A claim from a newer API server: fields this driver does not know, at every level, never fail a prepare
(model/api_base.py: objects read from the API server ignore unknown fields)."""

from __future__ import annotations

from typing import Any

from tests.node.conftest import Node
from tests.node.example_backend import DRIVER

from dra_driver.backend.interface import ClaimRef
from dra_driver.simulation.claims import allocated_claim_object

FUTURE = {"addedIn137": {"nested": ["value"]}}


def _with_future_fields(claim: dict[str, Any]) -> dict[str, Any]:
    """The claim with an unknown field added to every object in it, from the top to each result."""
    if isinstance(claim, dict):
        return {**{key: _with_future_fields(value) for key, value in claim.items()}, **FUTURE}
    if isinstance(claim, list):
        return [_with_future_fields(item) for item in claim]
    return claim


def test_a_claim_with_unknown_fields_everywhere_prepares_and_unprepares(node: Node) -> None:
    config = [{"requests": [], "opaque": {"driver": DRIVER, "parameters": {"mode": "shared"}}}]
    claim = _with_future_fields(allocated_claim_object("newer", "default", DRIVER, "node-a", {"gpu": ["gpu-0"]}, config=config))
    claim["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"] = {"mode": "shared"}  # the backend's own API stays strict
    stored = node.server.store.put(claim)
    ref = ClaimRef("default", "newer", stored["metadata"]["uid"])
    conn = node.connect()
    prepared = conn.prepare([ref]).claims[ref.uid]
    assert prepared.error == "" and [d.device_name for d in prepared.devices] == ["gpu-0"]
    assert [data["modes"] for op, data in node.backend.calls if op == "prepare"] == [["shared"]]  # the claim's config applied
    assert conn.unprepare([ref]).claims[ref.uid].error == ""
