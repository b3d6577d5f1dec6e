"""DeviceTaintRules (resource.k8s.io/v1alpha3, gate DRADeviceTaintRules): taints put on devices from outside the slices.

A rule selects devices by driver, pool and device name (all given criteria must match; an
empty selector matches every device, a missing one none) and adds one taint to each. The
allocator then treats the taint like one published in the slice: NoSchedule and NoExecute
keep untolerating requests off the device. The types are model/resource_v1alpha3.py's; a rule is
checked strictly (an unknown field is an error with its path) whether it comes from a file or a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from dra_driver.allocator.types import Pool, PoolDevice
from dra_driver.common.errors import FieldError
from dra_driver.explain.gates import FeatureGates
from dra_driver.model.api_base import field_errors, validate_authored
from dra_driver.model.api_group import TAINT_RULE_API_VERSION
from dra_driver.model.resource_v1alpha3 import DeviceTaintRule, DeviceTaintSelector


def parse_rules(docs: Iterable[Mapping[str, Any]], source: str) -> tuple[list[DeviceTaintRule], list[FieldError]]:
    rules: list[DeviceTaintRule] = []
    errors: list[FieldError] = []
    for index, doc in enumerate(docs):
        name = str((doc.get("metadata") or {}).get("name") or f"[{index}]")
        label = f"{source}: DeviceTaintRule {name}"
        if doc.get("apiVersion") != TAINT_RULE_API_VERSION:
            errors.append(FieldError(f"{label}.apiVersion", f"must be {TAINT_RULE_API_VERSION} (DeviceTaintRule exists only there in 1.35)"))
            continue
        try:
            rules.append(validate_authored(DeviceTaintRule, doc))
        except ValidationError as exc:
            errors += field_errors(exc, label)
    return rules, errors


def _selects(selector: DeviceTaintSelector | None, pool: Pool, device: PoolDevice) -> bool:
    if selector is None:
        return False
    return (selector.driver in (None, pool.driver)) and (selector.pool in (None, pool.name)) and (selector.device in (None, device.id.device))


def apply_rules(pools: Sequence[Pool], rules: Sequence[DeviceTaintRule], gates: FeatureGates) -> list[str]:
    """Add each rule's taint to the devices it selects; notes when the gate leaves them out."""
    if not rules:
        return []
    if not gates.device_taint_rules:
        return [f"{len(rules)} DeviceTaintRule(s) ignored: the DRADeviceTaintRules gate is off (give --feature-gates DRADeviceTaintRules=true)"]
    for pool in pools:
        for device in pool.devices:
            added = tuple(
                rule.spec.taint.model_dump(by_alias=True, exclude_none=True) for rule in rules if _selects(rule.spec.device_selector, pool, device)
            )
            if added:
                device.taints = device.taints + added
    return []
