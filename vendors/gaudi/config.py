"""The opaque configuration of gaudi.intel.com claims.

Intel's Gaudi driver has no opaque configuration, and there is nothing to
tune per claim today, so the only valid config is an empty GaudiConfig. It is
strict so that a typo or a setting meant for another driver fails loudly
instead of being ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from dra_driver.errors import ConfigError

API_VERSION = "gaudi.dra-driver.io/v1alpha1"
KIND = "GaudiConfig"


class GaudiConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    apiVersion: Literal["gaudi.dra-driver.io/v1alpha1"] = API_VERSION
    kind: Literal["GaudiConfig"] = KIND


def _describe(error: Mapping[str, Any]) -> str:
    field = ".".join(str(part) for part in error["loc"]) or "parameters"
    if error["type"] == "extra_forbidden":
        return f"unknown field {field!r}: GaudiConfig has no settings besides apiVersion and kind; remove it"
    if error["type"] == "literal_error":
        expected = API_VERSION if field == "apiVersion" else KIND
        return f"{field} is {error.get('input')!r}; it must be {expected!r}"
    return f"{field}: {error['msg']}"


def parse_config(parameters: Mapping[str, Any] | None) -> GaudiConfig:
    """A GaudiConfig from opaque parameters ({} or None gives the default); ConfigError otherwise."""
    if parameters is None:
        return GaudiConfig()
    if not isinstance(parameters, Mapping):
        raise ConfigError(f"gaudi.intel.com config parameters must be an object with apiVersion {API_VERSION!r} and kind {KIND!r}, not {type(parameters).__name__}")
    try:
        return GaudiConfig.model_validate(dict(parameters))
    except ValidationError as exc:
        raise ConfigError("invalid gaudi.intel.com config: " + "; ".join(_describe(e) for e in exc.errors())) from exc
