"""What a claim read leaves behind: nothing of the claim once it is dropped (docs/performance.md, "Memory over cycles")."""

from __future__ import annotations

import json

from dra_driver.kube.claims import ResourceClaim


def _claim_json(uid: str) -> str:
    return json.dumps({"metadata": {"name": "claim-a", "namespace": "ns", "uid": uid, "resourceVersion": "7"}})


def test_claim_values_are_not_kept_in_the_json_parsers_string_cache() -> None:
    """pydantic's JSON parser caches short strings process-wide unless told otherwise: two reads of the same
    claim then share one string object, and every claim's UID and names stay in the cache after the claim is gone."""
    first = ResourceClaim.model_validate_json(_claim_json("5f0c7e52-0c59-4c1e-9d7a-3a1f2b9c8d01"))
    second = ResourceClaim.model_validate_json(_claim_json("5f0c7e52-0c59-4c1e-9d7a-3a1f2b9c8d01"))
    assert first.metadata.uid == second.metadata.uid
    assert first.metadata.uid is not second.metadata.uid  # each read has its own string: nothing cached
