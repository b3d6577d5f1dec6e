"""Reading what a user asks `explain` about: ResourceClaims, ResourceClaimTemplates, Pods, DeviceClasses.

The types are model/resource_v1.py's and model/core_v1.py's; `parse_object` reads a user's document
strictly (an unknown field is an error with its path, the way the API server's strict field validation
refuses it) and a cluster's tolerantly (model/api_base.py). The API's rules for what is read are
model/resource_v1_validation.py's (`claim_spec_errors`, `class_spec_errors`). The allocator never sees
these models: `to_claim` turns a validated spec into the plain dataclasses of dra_driver.allocator.types.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from dra_driver.allocator.types import ClaimSpec, Constraint, Request, SubRequest, Toleration
from dra_driver.allocator.types import DeviceClassSpec as PlainClassSpec
from dra_driver.common.errors import FieldError
from dra_driver.model.api_base import LabelAt, field_errors, validate_authored
from dra_driver.model.core_v1 import Pod
from dra_driver.model.resource_v1 import (
    DeviceClass,
    DeviceSelection,
    DeviceSelector,
    DeviceToleration,
    OpaqueDeviceConfiguration,
    ResourceClaim,
    ResourceClaimSpec,
    ResourceClaimTemplate,
)

MODELS: dict[str, type[BaseModel]] = {
    "ResourceClaim": ResourceClaim,
    "ResourceClaimTemplate": ResourceClaimTemplate,
    "DeviceClass": DeviceClass,
    "Pod": Pod,
}


def parse_object(doc: Mapping[str, Any], label: str, label_at: LabelAt | None = None, *, from_server: bool = False) -> BaseModel | list[FieldError]:
    """One document as its model, or the errors that prevent reading it (each labelled by `label_at` when given).

    A user's document is checked strictly (an unknown field is an error, model/api_base.py); one `from_server`
    (a cluster's claims) tolerates fields a newer API server adds."""
    kind = str(doc.get("kind") or "")
    model = MODELS.get(kind)
    if model is None:
        return [FieldError(f"{label}.kind", f"{kind!r} is not one of {', '.join(MODELS)}")]
    try:
        return model.model_validate(dict(doc)) if from_server else validate_authored(model, doc)
    except PydanticValidationError as exc:
        return field_errors(exc, label, label_at)


# -- conversion to the allocator's plain types -------------------------------------------------


def _expressions(selectors: Iterable[DeviceSelector]) -> tuple[str, ...]:
    return tuple(s.cel.expression for s in selectors if s.cel is not None)


def _opaque(opaque: OpaqueDeviceConfiguration) -> dict[str, Any]:
    return {"driver": opaque.driver, "parameters": opaque.parameters}


def _tolerations(tolerations: Iterable[DeviceToleration]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(key=t.key, operator=t.operator, value=t.value, effect=t.effect, toleration_seconds=t.toleration_seconds) for t in tolerations
    )


def _sub(name: str, selection: DeviceSelection, admin: bool) -> SubRequest:
    all_mode = selection.allocation_mode == "All"
    return SubRequest(
        name=name,
        class_name=selection.device_class_name,
        selectors=_expressions(selection.selectors),
        all_devices=all_mode,
        count=0 if all_mode else (selection.count or 1),
        admin_access=admin,
        tolerations=_tolerations(selection.tolerations),
        capacity_requests=dict(selection.capacity.requests) if selection.capacity else {},
    )


def to_claim(spec: ResourceClaimSpec, name: str, namespace: str) -> ClaimSpec:
    """A validated spec as the allocator's input (defaults applied: ExactCount, count 1)."""
    requests: list[Request] = []
    for request in spec.devices.requests:
        if request.exactly is not None:
            exact = _sub(request.name, request.exactly, bool(request.exactly.admin_access))
            requests.append(Request(request.name, (exact,), prioritized=False))
        else:
            subs = tuple(_sub(s.name, s, False) for s in request.first_available or [])
            requests.append(Request(request.name, subs, prioritized=True))
    constraints = tuple(
        Constraint(requests=tuple(c.requests), match_attribute=c.match_attribute, distinct_attribute=c.distinct_attribute)
        for c in spec.devices.constraints
    )
    configs = tuple((tuple(c.requests), _opaque(c.opaque)) for c in spec.devices.config if c.opaque)
    return ClaimSpec(name=name, namespace=namespace, requests=tuple(requests), constraints=constraints, configs=configs)


def to_class(device_class: DeviceClass) -> PlainClassSpec:
    """A validated DeviceClass as the allocator's input."""
    return PlainClassSpec(
        name=device_class.metadata.name,
        selectors=_expressions(device_class.spec.selectors),
        configs=tuple(_opaque(c.opaque) for c in device_class.spec.config if c.opaque),
    )
