"""Opaque device configuration compatible with the NVIDIA DRA driver (resource.nvidia.com/v1beta1).

Kinds GpuConfig and MigDeviceConfig with `sharing` (TimeSlicing or MPS), decoded
strictly: an unknown field is a ConfigError naming it, as upstream's strict
decoder does. Field names and ranges follow upstream's API types.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dra_driver.backend.support import config_model
from dra_driver.backend.vocabulary import NVIDIA_DRIVER
from dra_driver.common.errors import ConfigError
from dra_driver.model import quantity

API_VERSION = "resource.nvidia.com/v1beta1"
KINDS = ("GpuConfig", "MigDeviceConfig")
# Upstream maps the interval names to the values of `nvidia-smi compute-policy --set-timeslice`.
TIMESLICE_VALUES = {"Default": 0, "Short": 1, "Medium": 2, "Long": 3}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TimeSlicingConfig(_Strict):
    interval: Literal["Default", "Short", "Medium", "Long"] = "Default"


def _memory_limit(value: str) -> str:
    try:
        amount = quantity.parse(value)
    except (ValueError, TypeError, ArithmeticError):
        raise ValueError(f"{value!r} is not a quantity such as '1Gi'") from None
    if amount < 1 << 20:
        raise ValueError(f"{value!r} is below the 1Mi minimum")
    return value


class MpsConfig(_Strict):
    defaultActiveThreadPercentage: int | None = Field(default=None, ge=0, le=100)
    defaultPinnedDeviceMemoryLimit: str | None = None
    defaultPerDevicePinnedMemoryLimit: dict[str, str] | None = None  # key: GPU index or UUID
    multiUser: bool | None = None

    @field_validator("defaultPinnedDeviceMemoryLimit")
    @classmethod
    def _check_default_limit(cls, value: str | None) -> str | None:
        return None if value is None else _memory_limit(value)

    @field_validator("defaultPerDevicePinnedMemoryLimit")
    @classmethod
    def _check_per_device(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return None if value is None else {key: _memory_limit(limit) for key, limit in value.items()}


class Sharing(_Strict):
    strategy: Literal["TimeSlicing", "MPS"]
    timeSlicingConfig: TimeSlicingConfig | None = None
    mpsConfig: MpsConfig | None = None

    @model_validator(mode="after")
    def _matching_config(self) -> Sharing:
        if self.strategy == "TimeSlicing" and self.mpsConfig is not None:
            raise ValueError("mpsConfig is set but strategy is TimeSlicing; remove mpsConfig or use strategy: MPS")
        if self.strategy == "MPS" and self.timeSlicingConfig is not None:
            raise ValueError("timeSlicingConfig is set but strategy is MPS; remove timeSlicingConfig or use strategy: TimeSlicing")
        return self


class GpuConfig(_Strict):
    apiVersion: Literal["resource.nvidia.com/v1beta1"]
    kind: Literal["GpuConfig"]
    sharing: Sharing | None = None


class MigDeviceConfig(_Strict):
    apiVersion: Literal["resource.nvidia.com/v1beta1"]
    kind: Literal["MigDeviceConfig"]
    sharing: Sharing | None = None


NvidiaConfig = GpuConfig | MigDeviceConfig


def _describe(error: Mapping[str, Any]) -> str:
    path = ".".join(str(part) for part in error["loc"]) or "(root)"
    if error["type"] == "extra_forbidden":
        return f"unknown field {path!r}; remove it (see resource.nvidia.com/v1beta1 {KINDS})"
    return f"field {path!r}: {error['msg']}"


def validate_config(parameters: Mapping[str, Any]) -> NvidiaConfig:
    """Strictly decode one opaque parameters object; raise ConfigError naming the bad field."""
    kinds: dict[str, type[NvidiaConfig]] = {"GpuConfig": GpuConfig, "MigDeviceConfig": MigDeviceConfig}
    model = config_model(parameters, kinds, API_VERSION, NVIDIA_DRIVER)
    try:
        return model.model_validate(dict(parameters))
    except ValidationError as exc:
        raise ConfigError(f"{model.__name__}: " + "; ".join(_describe(error) for error in exc.errors())) from exc
