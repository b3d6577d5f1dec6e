"""The opaque configuration of gaudi.intel.com claims.

Intel's Gaudi driver has no opaque configuration, and there is nothing to
tune per claim today, so the only valid config is an empty GaudiConfig. It is
strict so that a typo or a setting meant for another driver fails loudly
instead of being ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from dra_driver.backend.support import validate_settingless_config
from dra_driver.backend.vocabulary import GAUDI_DRIVER

API_VERSION: Final = "gaudi.dra-driver.io/v1alpha1"
KIND: Final = "GaudiConfig"


class GaudiConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    apiVersion: Literal["gaudi.dra-driver.io/v1alpha1"] = API_VERSION
    kind: Literal["GaudiConfig"] = KIND


def parse_config(parameters: Mapping[str, Any] | None) -> GaudiConfig:
    """A GaudiConfig from opaque parameters ({} or None gives the default); ConfigError otherwise."""
    if parameters is None:
        return GaudiConfig()
    return validate_settingless_config(GaudiConfig, parameters, GAUDI_DRIVER)
