"""The opaque device configuration of gpu.amd.com claims.

Upstream's `gpu.resource.amd.com/v1alpha1` `GpuConfig` has no fields; we accept
exactly that and refuse anything else, naming the field, so a typo or a config
meant for another driver is an error instead of being silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from dra_driver.backend.support import validate_settingless_config
from dra_driver.backend.vocabulary import AMD_DRIVER

API_VERSION: Final = "gpu.resource.amd.com/v1alpha1"
KIND: Final = "GpuConfig"


class GpuConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    apiVersion: Literal["gpu.resource.amd.com/v1alpha1"] = API_VERSION  # noqa: N815 - wire name
    kind: Literal["GpuConfig"] = KIND


def validate_config(parameters: Mapping[str, Any]) -> GpuConfig:
    return validate_settingless_config(GpuConfig, parameters, AMD_DRIVER)
