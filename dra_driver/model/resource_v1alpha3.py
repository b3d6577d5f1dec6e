"""The resource.k8s.io/v1alpha3 types the tools read: DeviceTaintRule (gate DRADeviceTaintRules).

Declared on api_base.py's ApiModel like every API type; explain/taint_rules.py validates rules from files
and clusters with `validate_authored` (unknown fields are errors with their path, metadata and status
are not checked) and applies them to a fleet.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from dra_driver.model.api_base import ApiModel
from dra_driver.model.core_v1 import ObjectMeta


class DeviceTaintSelector(ApiModel):
    driver: str | None = None
    pool: str | None = None
    device: str | None = None


class DeviceTaint(ApiModel):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "NoExecute", "None"]
    time_added: str | None = None


class DeviceTaintRuleSpec(ApiModel):
    device_selector: DeviceTaintSelector | None = None
    taint: DeviceTaint


class DeviceTaintRule(ApiModel):
    api_version: str
    kind: Literal["DeviceTaintRule"]
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: DeviceTaintRuleSpec
    status: Any = None  # written by the API server; not read
