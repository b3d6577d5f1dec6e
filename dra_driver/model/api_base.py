"""The base of every Kubernetes API type the driver reads, how strictly each read is checked, and the wording
of every error about an object's shape.

The types are declared once (`core_v1.py`, `resource_v1.py`, `resource_v1alpha3.py`); how strict a read is
depends on who wrote the object, not on the type:

- **Read from the API server** (the node's claim reader and claim cache, explain's and the demo's cluster
  reads): a plain `model_validate`. Unknown fields are ignored (`extra="ignore"`), so a field a newer API
  server adds never fails a prepare or an explain.
- **Written by a user** (explain and template inputs, DeviceClass files): `validate_authored`, which
  validates with `extra="forbid"`. Pydantic applies that to every nested type, so an unknown field anywhere
  is an error with its path, the way the API server's strict field validation refuses it; `field_errors`
  words it (a v1beta1 request field says "move it under `exactly:`") and the caller adds its file line.
- **Parts no user writes or that the tools read only a few fields of** (metadata, which the input layer's
  envelope checks; status, which the API server writes; Pods) derive from `Tolerant`: they are validated
  without the override, so their unknown fields are ignored even in a user's file.

Every type is frozen: values read from the API server are shared (the claim cache hands the same object to
concurrent prepares), and nothing may change them in place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict, ModelWrapValidatorHandler, ValidationInfo, model_validator
from pydantic import ValidationError as PydanticValidationError
from pydantic.alias_generators import to_camel

from dra_driver.common.errors import FieldError

ModelT = TypeVar("ModelT", bound=BaseModel)
LabelAt = Callable[[tuple[str | int, ...]], str]  # pydantic's location of an error -> the label its path starts with

_AUTHORED = object()  # the validation context of validate_authored: what Tolerant parts recognise


class ApiModel(BaseModel):
    """A Kubernetes API type: camelCase on the wire, snake_case in Python, unknown fields ignored unless the
    read is `validate_authored`."""

    # cache_strings="keys": the JSON parser's process-wide string cache (16,384 entries) would otherwise fill up with
    # every claim's UID, name and device names, which are new on every claim: about 1 MiB of RSS that churn never gives back.
    model_config = ConfigDict(extra="ignore", alias_generator=to_camel, populate_by_name=True, frozen=True, cache_strings="keys")


class Tolerant(ApiModel):
    """A part whose unknown fields are ignored even in a user's file: it is validated afresh, without the
    `extra="forbid"` of `validate_authored` (which pydantic would otherwise apply to it too)."""

    @model_validator(mode="wrap")
    @classmethod
    def _without_authored_strictness(cls, data: Any, handler: ModelWrapValidatorHandler[Self], info: ValidationInfo) -> Self:
        if info.context is _AUTHORED:
            return cls.model_validate(data)  # a new validation: no extra override, no context
        return handler(data)


def validate_authored(model: type[ModelT], data: Mapping[str, Any]) -> ModelT:
    """`data` as `model`, an object a user wrote: unknown fields are errors (except in Tolerant parts)."""
    return model.model_validate(dict(data), extra="forbid", context=_AUTHORED)


# Fields resource.k8s.io/v1beta1 put directly under a request, that v1 moved under `exactly:`.
_EXACT_FIELDS = frozenset({"deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations", "capacity"})


def unknown_field_message(loc: tuple[str | int, ...]) -> str:
    """Why a field is unknown and what to do: a v1beta1 request field goes under `exactly:`, a selector's
    expression under `cel:`, anything else goes."""
    if len(loc) >= 4 and loc[-4:-2] == ("devices", "requests") and isinstance(loc[-2], int) and loc[-1] in _EXACT_FIELDS:
        return (f"unknown field in resource.k8s.io/v1: move it under `exactly:` (requests[].{loc[-1]} is the v1beta1 shape; "
                "v1 puts deviceClassName, count, selectors, allocationMode, adminAccess, tolerations and capacity in requests[].exactly)")
    if len(loc) >= 3 and loc[-3] == "selectors" and isinstance(loc[-2], int) and loc[-1] == "expression":
        return "unknown field in resource.k8s.io/v1: move it under `cel:` (a selector is `- cel: {expression: ...}`)"
    return "unknown field; remove it (check spelling and the resource.k8s.io/v1 schema)"


def field_errors(exc: PydanticValidationError, prefix: str, label_at: LabelAt | None = None) -> list[FieldError]:
    """Pydantic's errors as FieldErrors with Kubernetes-style paths (a.b[0].c); `label_at` gives the prefix per
    error (the field's own file line), else `prefix`."""
    out: list[FieldError] = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        path = label_at(loc) if label_at else prefix
        for part in loc:
            path += f"[{part}]" if isinstance(part, int) else f".{part}"
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = unknown_field_message(loc)
        out.append(FieldError(path, message))
    return out
