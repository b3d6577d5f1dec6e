"""Which opaque configuration applies to which allocated device.

The API's rules (resource.k8s.io/v1 `DeviceAllocationConfiguration`): entries
are ordered class-sourced first, then claim-sourced; an entry applies to a
result when its `requests` list is empty or names the result's request, or the
`<request>` part of a `<request>/<subrequest>` result; a later entry overrides
an earlier one. Entries for other drivers are ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from dra_driver.common.errors import ConfigError

if TYPE_CHECKING:  # the claim models are built with the API client, after the sockets serve (dra_driver.node.daemon)
    from dra_driver.model.resource_v1 import DeviceAllocationConfiguration, DeviceRequestAllocationResult


def base_request(request: str) -> str:
    """`gpu/large` -> `gpu`: containers reference base request names."""
    return request.split("/", 1)[0]


def applies_to(entry: DeviceAllocationConfiguration, result: DeviceRequestAllocationResult) -> bool:
    if not entry.requests:
        return True
    return result.request in entry.requests or base_request(result.request) in entry.requests


def resolve_configs(
    driver: str,
    entries: Sequence[DeviceAllocationConfiguration],
    results: Sequence[DeviceRequestAllocationResult],
    validate: Callable[[Mapping[str, Any]], BaseModel],
) -> list[BaseModel | None]:
    """The effective validated config of each result (same order), None where none applies.

    Every entry of ours that applies to at least one of our results is
    validated, even if a later one overrides it: a typo must not hide.
    """
    validated: dict[int, BaseModel] = {}
    effective: list[BaseModel | None] = [None] * len(results)
    for index, entry in enumerate(entries):
        if entry.opaque is None or entry.opaque.driver != driver:
            continue
        targets = [i for i, result in enumerate(results) if applies_to(entry, result)]
        if not targets:
            continue
        validated[index] = _validate(index, entry, validate)
        for i in targets:
            effective[i] = validated[index]
    return effective


def _validate(index: int, entry: DeviceAllocationConfiguration, validate: Callable[[Mapping[str, Any]], BaseModel]) -> BaseModel:
    where = f"status.allocation.devices.config[{index}].opaque.parameters (source {entry.source or 'unknown'})"
    parameters = entry.opaque.parameters if entry.opaque else None
    if not isinstance(parameters, Mapping):
        raise ConfigError(f"{where}: must be a JSON object, got {type(parameters).__name__}")
    try:
        return validate(parameters)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
