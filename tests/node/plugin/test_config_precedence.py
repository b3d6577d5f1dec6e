"""Opaque config precedence (class entries first, claim entries later win; request scoping)."""

from __future__ import annotations

from tests.node.example_backend import DRIVER, ExampleBackend, ExampleConfig

from dra_driver.model.resource_v1 import DeviceAllocationConfiguration, DeviceRequestAllocationResult
from dra_driver.node.plugin.config import resolve_configs
from dra_driver.backend.interface import BackendSettings


def entry(source: str, requests: list[str], mode: str, driver: str = DRIVER) -> DeviceAllocationConfiguration:
    return DeviceAllocationConfiguration.model_validate(
        {"source": source, "requests": requests, "opaque": {"driver": driver, "parameters": {"mode": mode}}}
    )


def result(request: str, device: str) -> DeviceRequestAllocationResult:
    return DeviceRequestAllocationResult.model_validate({"request": request, "driver": DRIVER, "pool": "p", "device": device})


def modes(entries, results):
    backend = ExampleBackend(BackendSettings())
    configs = resolve_configs(DRIVER, entries, results, backend.validate_config)
    return [c.mode if isinstance(c, ExampleConfig) else None for c in configs]


def test_later_claim_entry_overrides_class_entry():
    results = [result("gpu", "gpu-0")]
    assert modes([entry("FromClass", [], "shared"), entry("FromClaim", [], "exclusive")], results) == ["exclusive"]
    assert modes([entry("FromClass", [], "shared")], results) == ["shared"]


def test_request_scoping_and_subrequests():
    results = [result("a", "gpu-0"), result("b/large", "gpu-1"), result("c", "gpu-2")]
    entries = [entry("FromClass", [], "exclusive"), entry("FromClaim", ["b"], "shared"), entry("FromClaim", ["c/other"], "shared")]
    assert modes(entries, results) == ["exclusive", "shared", "exclusive"]
    assert modes([entry("FromClass", ["b/large"], "shared")], results) == [None, "shared", None]


def test_other_driver_entries_ignored_even_if_invalid_for_us():
    results = [result("a", "gpu-0")]
    other = DeviceAllocationConfiguration.model_validate(
        {"source": "FromClaim", "requests": [], "opaque": {"driver": "x.other.com", "parameters": {"bogus": 1}}}
    )
    assert modes([entry("FromClass", [], "shared"), other], results) == ["shared"]
