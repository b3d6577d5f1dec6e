"""The opaque device configuration of gpu.amd.com claims.

Upstream's `gpu.resource.amd.com/v1alpha1` `GpuConfig` has no fields; we accept
exactly that and refuse anything else, naming the field, so a typo or a config
meant for another driver is an error instead of being silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from dra_driver.errors import ConfigError

API_VERSION = "gpu.resource.amd.com/v1alpha1"
KIND = "GpuConfig"


class GpuConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    apiVersion: Literal["gpu.resource.amd.com/v1alpha1"] = API_VERSION  # noqa: N815 - wire name
    kind: Literal["GpuConfig"] = KIND


def _describe(error: Mapping[str, Any]) -> str:
    field = ".".join(str(part) for part in error.get("loc", ())) or "(parameters)"
    if error.get("type") == "extra_forbidden":
        return f"{field}: unknown field; {KIND} has no settings besides apiVersion and kind, remove it"
    if field == "apiVersion":
        return f"apiVersion: {error.get('input')!r} is not supported; use {API_VERSION!r}"
    if field == "kind":
        return f"kind: {error.get('input')!r} is not supported; use {KIND!r}"
    return f"{field}: {error.get('msg')}"


def validate_config(parameters: Mapping[str, Any]) -> GpuConfig:
    if not isinstance(parameters, Mapping):
        raise ConfigError(f"gpu.amd.com opaque parameters must be an object with apiVersion {API_VERSION!r} and kind {KIND!r}")
    try:
        return GpuConfig.model_validate(dict(parameters))
    except PydanticValidationError as exc:
        raise ConfigError("invalid gpu.amd.com configuration: " + "; ".join(_describe(e) for e in exc.errors())) from exc
