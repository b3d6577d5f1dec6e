"""Allocated ResourceClaims as the scheduler would leave them, for benchmarks and tests that run no scheduler."""

from __future__ import annotations

from typing import Any

from dra_driver.model.api_group import API_VERSION


def allocated_claim_object(
    name: str,
    namespace: str,
    driver: str,
    pool: str,
    devices: dict[str, list[str]],
    device_class: str = "gpu.example.com",
    config: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ResourceClaim wire object already allocated (as the scheduler would leave it): request -> devices.

    For demos, benchmarks and tests that have no scheduler.
    """
    requests = [
        {"name": request, "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": len(names)}}
        for request, names in devices.items()
    ]
    results = [{"request": request, "driver": driver, "pool": pool, "device": device} for request, names in devices.items() for device in names]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": requests}},
        "status": {"allocation": {"devices": {"results": results, "config": list(config or [])}}},
    }
