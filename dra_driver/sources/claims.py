"""Reading what a user asks `explain` about: ResourceClaims, ResourceClaimTemplates, Pods, DeviceClasses.

The pydantic models mirror resource.k8s.io/v1 (k8s.io/api resource/v1/types.go) with
`extra="forbid"`, the way the API server's strict field validation refuses
unknown fields. `claim_spec_errors` then applies the numeric and format limits
of section 3.6 and returns every problem with its field path, so a user sees
all of them at once. The allocator never sees these models: `to_claim` turns a
validated spec into the plain dataclasses of dra_driver.allocator.types.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError
from pydantic.alias_generators import to_camel

from dra_driver.common import suggest
from dra_driver.allocator.types import ClaimSpec, Constraint, Request, SubRequest, Toleration
from dra_driver.allocator.types import DeviceClassSpec as PlainClassSpec
from dra_driver.common.errors import FieldError
from dra_driver.model.validation import (
    driver_name_problem,
    is_dns_label,
    is_dns_subdomain,
    label_key_problem,
    qualified_name_problem,
)

MAX_REQUESTS = 32
MAX_SUBREQUESTS = 8
MAX_SELECTORS = 32
MAX_CONSTRAINTS = 32
MAX_CONFIGS = 32
MAX_CONSTRAINT_REQUESTS = 32
MAX_TOLERATIONS = 16
MAX_EXPRESSION_BYTES = 10240
MAX_OPAQUE_BYTES = 10240
ALLOCATION_MODES = ("ExactCount", "All")
TOLERATION_OPERATORS = ("Equal", "Exists")
TOLERATION_EFFECTS = ("", "NoSchedule", "NoExecute", "None")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)


class _Loose(BaseModel):
    """Objects we only read a few fields of (metadata, Pods): other fields are kept, not checked."""

    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)


class ObjectMeta(_Loose):
    name: str = ""
    generate_name: str = ""
    namespace: str = ""
    uid: str = ""


class CelSelector(_Strict):
    expression: str


class DeviceSelector(_Strict):
    cel: CelSelector | None = None


class DeviceToleration(_Strict):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class CapacityRequirements(_Strict):
    requests: dict[str, str | int] = Field(default_factory=dict)


class _DeviceSelection(_Strict):
    """The fields ExactDeviceRequest and DeviceSubRequest share: which devices, how many."""

    device_class_name: str = ""
    selectors: list[DeviceSelector] = Field(default_factory=list)
    allocation_mode: str | None = None
    count: int | None = None
    tolerations: list[DeviceToleration] = Field(default_factory=list)
    capacity: CapacityRequirements | None = None


class ExactDeviceRequest(_DeviceSelection):
    admin_access: bool | None = None


class DeviceSubRequest(_DeviceSelection):
    name: str = ""


class DeviceRequest(_Strict):
    name: str = ""
    exactly: ExactDeviceRequest | None = None
    first_available: list[DeviceSubRequest] | None = None


class DeviceConstraint(_Strict):
    requests: list[str] = Field(default_factory=list)
    match_attribute: str | None = None
    distinct_attribute: str | None = None


class OpaqueConfiguration(_Strict):
    driver: str = ""
    parameters: Any = None


class DeviceClaimConfiguration(_Strict):
    requests: list[str] = Field(default_factory=list)
    opaque: OpaqueConfiguration | None = None


class DeviceClaim(_Strict):
    requests: list[DeviceRequest] = Field(default_factory=list)
    constraints: list[DeviceConstraint] = Field(default_factory=list)
    config: list[DeviceClaimConfiguration] = Field(default_factory=list)


class ResourceClaimSpec(_Strict):
    devices: DeviceClaim = Field(default_factory=DeviceClaim)


class _ResourceObject(_Strict):
    """The envelope every resource.k8s.io/v1 object shares; subclasses add kind and spec."""

    api_version: str = "resource.k8s.io/v1"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)


class ResourceClaim(_ResourceObject):
    kind: str = "ResourceClaim"
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)
    status: dict[str, Any] | None = None


class TemplateMeta(_Strict):
    """Only labels and annotations are copied into generated claims (3.5)."""

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class ResourceClaimTemplateSpec(_Strict):
    metadata: TemplateMeta | None = None
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)


class ResourceClaimTemplate(_ResourceObject):
    kind: str = "ResourceClaimTemplate"
    spec: ResourceClaimTemplateSpec = Field(default_factory=ResourceClaimTemplateSpec)


class DeviceClassConfiguration(_Strict):
    opaque: OpaqueConfiguration | None = None


class DeviceClassSpec(_Strict):
    selectors: list[DeviceSelector] = Field(default_factory=list)
    config: list[DeviceClassConfiguration] = Field(default_factory=list)
    extended_resource_name: str | None = None


class DeviceClass(_ResourceObject):
    kind: str = "DeviceClass"
    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec)


class PodResourceClaim(_Loose):
    name: str = ""
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class PodSpec(_Loose):
    resource_claims: list[PodResourceClaim] = Field(default_factory=list)


class Pod(_Loose):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)


MODELS: dict[str, type[BaseModel]] = {
    "ResourceClaim": ResourceClaim,
    "ResourceClaimTemplate": ResourceClaimTemplate,
    "DeviceClass": DeviceClass,
    "Pod": Pod,
}


# Fields resource.k8s.io/v1beta1 put directly under a request, that v1 moved under `exactly:`.
_EXACT_FIELDS = frozenset({"deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations", "capacity"})

LabelAt = Callable[[tuple[str | int, ...]], str]  # pydantic's location of an error -> the label its path starts with


def _extra_field_message(loc: tuple[str | int, ...]) -> str:
    """Why a field is unknown and what to do: a v1beta1 request field goes under `exactly:`, anything else goes."""
    if len(loc) >= 4 and loc[-4:-2] == ("devices", "requests") and isinstance(loc[-2], int) and loc[-1] in _EXACT_FIELDS:
        return (f"unknown field in resource.k8s.io/v1: move it under `exactly:` (requests[].{loc[-1]} is the v1beta1 shape; "
                "v1 puts deviceClassName, count, selectors, allocationMode, adminAccess, tolerations and capacity in requests[].exactly)")
    return "unknown field; remove it (check spelling and the resource.k8s.io/v1 schema)"


def pydantic_errors(exc: PydanticValidationError, prefix: str, label_at: LabelAt | None = None) -> list[FieldError]:
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
            message = _extra_field_message(loc)
        out.append(FieldError(path, message))
    return out


def parse_object(doc: Mapping[str, Any], label: str, label_at: LabelAt | None = None) -> BaseModel | list[FieldError]:
    """One document as its model, or the errors that prevent reading it (each labelled by `label_at` when given)."""
    kind = str(doc.get("kind") or "")
    model = MODELS.get(kind)
    if model is None:
        return [FieldError(f"{label}.kind", f"{kind!r} is not one of {', '.join(MODELS)}")]
    try:
        return model.model_validate(dict(doc))
    except PydanticValidationError as exc:
        return pydantic_errors(exc, label, label_at)


# -- semantic validation (pkg/apis/resource/validation, docs/sources.md) ---------------------------------------


CompileCheck = Callable[[str], str | None]  # expression -> problem, or None when it compiles


def _too_many(items: Sequence[Any], limit: int, path: str, noun: str) -> list[FieldError]:
    if len(items) > limit:
        return [FieldError(path, f"has {len(items)} {noun}; at most {limit} are allowed")]
    return []


def _selector_errors(selectors: list[DeviceSelector], path: str, compile_check: CompileCheck | None) -> list[FieldError]:
    out = _too_many(selectors, MAX_SELECTORS, path, "selectors")
    for index, selector in enumerate(selectors):
        spath = f"{path}[{index}].cel"
        if selector.cel is None:
            out.append(FieldError(spath, "required: a selector needs cel.expression"))
            continue
        expression = selector.cel.expression
        if not expression.strip():
            out.append(FieldError(f"{spath}.expression", "required: must be a non-empty CEL expression"))
            continue
        size = len(expression.encode())
        if size > MAX_EXPRESSION_BYTES:
            out.append(FieldError(f"{spath}.expression", f"is {size} bytes long; at most {MAX_EXPRESSION_BYTES} are allowed"))
            continue
        problem = compile_check(expression) if compile_check else None
        if problem:
            # A syntax error's problem ends in lines of its own (the expression, a caret): the note goes after them.
            note = "\n(the API server refuses it at creation)" if "\n" in problem else " (the API server refuses it at creation)"
            out.append(FieldError(f"{spath}.expression", f"Invalid value: {_quoted(expression)}: {problem}{note}"))
    return out


def _quoted(expression: str, limit: int = 120) -> str:
    """The expression as the API server quotes an invalid value (Go %q), shortened."""
    return json.dumps(expression if len(expression) <= limit else expression[: limit - 3] + "...")


def _toleration_errors(tolerations: list[DeviceToleration], path: str) -> list[FieldError]:
    out = _too_many(tolerations, MAX_TOLERATIONS, path, "tolerations")
    for index, toleration in enumerate(tolerations):
        tpath = f"{path}[{index}]"
        if toleration.operator not in TOLERATION_OPERATORS:
            out.append(FieldError(f"{tpath}.operator", f"{toleration.operator!r} must be one of {', '.join(TOLERATION_OPERATORS)}"))
        if toleration.key:
            problem = label_key_problem(toleration.key)
            if problem:
                out.append(FieldError(f"{tpath}.key", problem))
        elif toleration.operator != "Exists":
            out.append(FieldError(f"{tpath}.operator", "must be Exists when key is empty"))
        if toleration.operator == "Exists" and toleration.value:
            out.append(FieldError(f"{tpath}.value", "must be empty when operator is Exists"))
        if toleration.effect not in TOLERATION_EFFECTS:
            out.append(FieldError(f"{tpath}.effect", f"{toleration.effect!r} must be empty or one of NoSchedule, NoExecute, None"))
        if toleration.toleration_seconds is not None and toleration.effect != "NoExecute":
            out.append(FieldError(f"{tpath}.tolerationSeconds", "only allowed with effect NoExecute"))
    return out


def _count_errors(mode: str | None, count: int | None, path: str) -> list[FieldError]:
    if mode not in (None, *ALLOCATION_MODES):
        return [FieldError(f"{path}.allocationMode", f"{mode!r} must be ExactCount or All")]
    if (mode or "ExactCount") == "ExactCount":
        if count is not None and count <= 0:
            return [FieldError(f"{path}.count", f"must be greater than zero for ExactCount (got {count})")]
    elif count not in (None, 0):
        return [FieldError(f"{path}.count", f"must not be set with allocationMode All (got {count})")]
    return []


def _class_errors(name: str, path: str, classes: Mapping[str, Any] | None) -> list[FieldError]:
    if not name:
        return [FieldError(path, "required: name the DeviceClass to allocate from")]
    if not is_dns_subdomain(name):
        return [FieldError(path, f"{name!r} must be a DNS subdomain")]
    if classes is not None and name not in classes:
        hint = suggest.did_you_mean(name, classes)
        return [FieldError(path, f"DeviceClass {name!r} does not exist{'; ' + hint if hint else ''}; add it with --classes or fix the name")]
    return []


def _selection_errors(selection: _DeviceSelection, path: str, classes: Mapping[str, Any] | None, compile_check: CompileCheck | None) -> list[FieldError]:
    return [
        *_class_errors(selection.device_class_name, f"{path}.deviceClassName", classes),
        *_selector_errors(selection.selectors, f"{path}.selectors", compile_check),
        *_count_errors(selection.allocation_mode, selection.count, path),
        *_toleration_errors(selection.tolerations, f"{path}.tolerations"),
    ]


def _request_errors(request: DeviceRequest, path: str, classes: Mapping[str, Any] | None, compile_check: CompileCheck | None) -> list[FieldError]:
    out: list[FieldError] = []
    if not is_dns_label(request.name):
        out.append(FieldError(f"{path}.name", f"{request.name!r} must be a DNS label (lower-case letters, digits, '-', at most 63)"))
    if (request.exactly is None) == (request.first_available is None):
        out.append(FieldError(path, "exactly one of exactly or firstAvailable must be set"))
    if request.exactly is not None:
        out += _selection_errors(request.exactly, f"{path}.exactly", classes, compile_check)
    if request.first_available is not None:
        fpath = f"{path}.firstAvailable"
        subs = request.first_available
        if not 1 <= len(subs) <= MAX_SUBREQUESTS:
            out.append(FieldError(fpath, f"has {len(subs)} entries; between 1 and {MAX_SUBREQUESTS} are allowed"))
        seen: set[str] = set()
        for index, sub in enumerate(subs):
            spath = f"{fpath}[{index}]"
            if not is_dns_label(sub.name):
                out.append(FieldError(f"{spath}.name", f"{sub.name!r} must be a DNS label"))
            elif sub.name in seen:
                out.append(FieldError(f"{spath}.name", f"duplicate subrequest name {sub.name!r}"))
            seen.add(sub.name)
            out += _selection_errors(sub, spath, classes, compile_check)
    return out


def _reference_names(claim: DeviceClaim) -> set[str]:
    names: set[str] = set()
    for request in claim.requests:
        names.add(request.name)
        for sub in request.first_available or []:
            names.add(f"{request.name}/{sub.name}")
    return names


def _references_errors(refs: list[str], path: str, known: set[str]) -> list[FieldError]:
    out = _too_many(refs, MAX_CONSTRAINT_REQUESTS, path, "entries")
    if len(set(refs)) != len(refs):
        out.append(FieldError(path, "request names must be unique"))
    for index, ref in enumerate(refs):
        if ref not in known:
            out.append(FieldError(f"{path}[{index}]", f"{ref!r} is not a request (or request/subrequest) of this claim"))
    return out


def _opaque_errors(opaque: OpaqueConfiguration | None, path: str) -> list[FieldError]:
    if opaque is None:
        return [FieldError(f"{path}.opaque", "required: a config entry needs opaque.driver and opaque.parameters")]
    out: list[FieldError] = []
    problem = driver_name_problem(opaque.driver)
    if problem:
        out.append(FieldError(f"{path}.opaque.driver", problem))
    if not isinstance(opaque.parameters, dict):
        out.append(FieldError(f"{path}.opaque.parameters", "must be a JSON object (typically with apiVersion and kind)"))
    else:
        size = len(json.dumps(opaque.parameters, separators=(",", ":")).encode())
        if size > MAX_OPAQUE_BYTES:
            out.append(FieldError(f"{path}.opaque.parameters", f"is {size} bytes of JSON; at most {MAX_OPAQUE_BYTES} are allowed"))
    return out


def claim_spec_errors(
    spec: ResourceClaimSpec,
    path: str,
    classes: Mapping[str, Any] | None = None,
    compile_check: CompileCheck | None = None,
) -> list[FieldError]:
    """Every rule `spec` breaks, as the API server would report them.

    `classes` (name -> class) enables the unknown-DeviceClass check, `compile_check`
    (expression -> problem or None) the CEL compile check.
    """
    claim = spec.devices
    dpath = f"{path}.devices"
    out = _too_many(claim.requests, MAX_REQUESTS, f"{dpath}.requests", "requests")
    seen: set[str] = set()
    for index, request in enumerate(claim.requests):
        rpath = f"{dpath}.requests[{index}]"
        if request.name in seen:
            out.append(FieldError(f"{rpath}.name", f"duplicate request name {request.name!r}"))
        seen.add(request.name)
        out += _request_errors(request, rpath, classes, compile_check)
    known = _reference_names(claim)
    out += _too_many(claim.constraints, MAX_CONSTRAINTS, f"{dpath}.constraints", "constraints")
    for index, constraint in enumerate(claim.constraints):
        cpath = f"{dpath}.constraints[{index}]"
        out += _references_errors(constraint.requests, f"{cpath}.requests", known)
        if (constraint.match_attribute is None) == (constraint.distinct_attribute is None):
            out.append(FieldError(cpath, "exactly one of matchAttribute or distinctAttribute must be set"))
        for field_name, value in (("matchAttribute", constraint.match_attribute), ("distinctAttribute", constraint.distinct_attribute)):
            if value is not None:
                problem = qualified_name_problem(value, require_domain=True)
                if problem:
                    out.append(FieldError(f"{cpath}.{field_name}", f"{value!r} {problem}"))
    out += _too_many(claim.config, MAX_CONFIGS, f"{dpath}.config", "entries")
    for index, config in enumerate(claim.config):
        cpath = f"{dpath}.config[{index}]"
        out += _references_errors(config.requests, f"{cpath}.requests", known)
        out += _opaque_errors(config.opaque, cpath)
    return out


def class_spec_errors(device_class: DeviceClass, path: str, compile_check: CompileCheck | None = None) -> list[FieldError]:
    out: list[FieldError] = []
    if not is_dns_subdomain(device_class.metadata.name):
        out.append(FieldError(f"{path}.metadata.name", f"{device_class.metadata.name!r} must be a DNS subdomain"))
    out += _selector_errors(device_class.spec.selectors, f"{path}.spec.selectors", compile_check)
    out += _too_many(device_class.spec.config, MAX_CONFIGS, f"{path}.spec.config", "entries")
    for index, config in enumerate(device_class.spec.config):
        out += _opaque_errors(config.opaque, f"{path}.spec.config[{index}]")
    return out


# -- conversion to the allocator's plain types -------------------------------------------------


def _expressions(selectors: Iterable[DeviceSelector]) -> tuple[str, ...]:
    return tuple(s.cel.expression for s in selectors if s.cel is not None)


def _opaque(opaque: OpaqueConfiguration) -> dict[str, Any]:
    return {"driver": opaque.driver, "parameters": opaque.parameters}


def _tolerations(tolerations: Iterable[DeviceToleration]) -> tuple[Toleration, ...]:
    return tuple(Toleration(key=t.key, operator=t.operator, value=t.value, effect=t.effect, toleration_seconds=t.toleration_seconds) for t in tolerations)


def _sub(name: str, selection: _DeviceSelection, admin: bool) -> SubRequest:
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
