"""The rules of pkg/apis/resource/validation for what users write: ResourceClaim specs and DeviceClasses.

Every problem is returned with its field path, as the API server would report it, so a user sees all of
them at once (docs/sources.md). On resource_v1.py's types; sources/claims.py (explain, template, the demo)
and cel/classes.py (DeviceClass files) apply them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dra_driver.common import suggest
from dra_driver.common.errors import FieldError
from dra_driver.model.resource_v1 import (
    MAX_CONFIGS,
    MAX_CONSTRAINT_REQUESTS,
    MAX_CONSTRAINTS,
    MAX_EXPRESSION_BYTES,
    MAX_OPAQUE_BYTES,
    MAX_REQUESTS,
    MAX_SELECTORS,
    MAX_SUBREQUESTS,
    MAX_TOLERATIONS,
    DeviceClaim,
    DeviceClass,
    DeviceRequest,
    DeviceSelection,
    DeviceSelector,
    DeviceToleration,
    OpaqueDeviceConfiguration,
    ResourceClaimSpec,
)
from dra_driver.model.names import MAX_DNS_LABEL
from dra_driver.model.validation import (
    driver_name_problem,
    is_dns_label,
    is_dns_subdomain,
    label_key_problem,
    qualified_name_problem,
)

ALLOCATION_MODES = ("ExactCount", "All")
TOLERATION_OPERATORS = ("Equal", "Exists")
TOLERATION_EFFECTS = ("", "NoSchedule", "NoExecute", "None")

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


def _selection_errors(
    selection: DeviceSelection, path: str, classes: Mapping[str, Any] | None, compile_check: CompileCheck | None
) -> list[FieldError]:
    return [
        *_class_errors(selection.device_class_name, f"{path}.deviceClassName", classes),
        *_selector_errors(selection.selectors, f"{path}.selectors", compile_check),
        *_count_errors(selection.allocation_mode, selection.count, path),
        *_toleration_errors(selection.tolerations, f"{path}.tolerations"),
    ]


def _request_errors(request: DeviceRequest, path: str, classes: Mapping[str, Any] | None, compile_check: CompileCheck | None) -> list[FieldError]:
    out: list[FieldError] = []
    if not is_dns_label(request.name):
        out.append(FieldError(f"{path}.name", f"{request.name!r} must be a DNS label (lower-case letters, digits, '-', at most {MAX_DNS_LABEL})"))
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


def _opaque_errors(opaque: OpaqueDeviceConfiguration | None, path: str) -> list[FieldError]:
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
