"""The resource.k8s.io/v1 ResourceSlice rules, checked before anything leaves the process.

Works on wire-format dicts (what render produces, what a user exports from a
cluster), so the same checks guard the publisher, `discover` and `explain --fleet`.
Every error names the slice, the device and the field (pkg/apis/resource/validation, docs/sources.md).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from dra_driver.common.errors import FieldError, ValidationError
from dra_driver.model import quantity
from dra_driver.model.names import is_dns_label as is_dns_label  # re-exported: the name rules live in names
from dra_driver.model.names import is_dns_subdomain as is_dns_subdomain
from dra_driver.model.names import MAX_DNS_LABEL, MAX_LABEL_VALUE, MAX_QUALIFIED_NAME, is_label_value, pool_name_problem

MAX_DEVICES = 128
MAX_DEVICES_ADVANCED = 64
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_VALUE_LENGTH = 64
MAX_DOMAIN_LENGTH = 63
MAX_ID_LENGTH = 32
MAX_DRIVER_NAME_LENGTH = 63
MAX_COUNTER_SETS = 8
MAX_COUNTERS_PER_SET = 32
MAX_CONSUMPTIONS_PER_DEVICE = 2
MAX_TAINTS = 16
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# Used with fullmatch: `$` alone would also accept a trailing newline.
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
# Semantic Versioning 2.0.0: numeric parts without leading zeros, optional pre-release and build.
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


def is_semver(value: str) -> bool:
    return isinstance(value, str) and bool(_SEMVER.fullmatch(value))


@functools.lru_cache(maxsize=4096)
def driver_name_problem(name: Any) -> str | None:
    """Why `name` is not a valid driver name (CSI driver-name rules), or None."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty string such as gpu.example.com"
    if len(name) > MAX_DRIVER_NAME_LENGTH:
        return f"is {len(name)} characters long; at most {MAX_DRIVER_NAME_LENGTH} are allowed"
    if not is_dns_subdomain(name.lower()):
        return "must be a DNS subdomain: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
    return None


@functools.lru_cache(maxsize=4096)
def qualified_name_problem(name: Any, require_domain: bool = False) -> str | None:
    """Why `name` is not a valid attribute/capacity key, or None."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty name such as 'memory' or 'example.com/memory'"
    parts = name.split("/")
    if len(parts) > 2:
        return "may contain at most one '/' (domain/identifier)"
    if len(parts) == 2:
        domain, identifier = parts
        if not domain:
            return "has an empty domain before '/'"
        if len(domain) > MAX_DOMAIN_LENGTH or not is_dns_subdomain(domain.lower()):
            return f"domain {domain!r} must be a DNS subdomain of at most {MAX_DOMAIN_LENGTH} characters"
    else:
        if require_domain:
            return "must be fully qualified as <domain>/<identifier>"
        identifier = parts[0]
    if not identifier:
        return "has an empty identifier after '/'"
    if len(identifier) > MAX_ID_LENGTH:
        return f"identifier {identifier!r} is {len(identifier)} characters long; at most {MAX_ID_LENGTH} are allowed"
    if not _C_IDENTIFIER.fullmatch(identifier):
        return f"identifier {identifier!r} must be a C identifier ([A-Za-z_][A-Za-z0-9_]*)"
    return None


@functools.lru_cache(maxsize=4096)
def label_key_problem(key: Any) -> str | None:
    """Why `key` is not a valid label key (taint keys use this format), or None."""
    if not isinstance(key, str) or not key:
        return "must be a non-empty label key such as example.com/unhealthy"
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return "may contain at most one '/'"
    if prefix and not is_dns_subdomain(prefix):  # its length limit included
        return f"prefix {prefix!r} must be a lower-case DNS subdomain"
    if len(name) > MAX_QUALIFIED_NAME or not _LABEL_NAME.fullmatch(name):
        return f"name {name!r} must be at most {MAX_QUALIFIED_NAME} characters of [A-Za-z0-9-_.], starting and ending alphanumeric"
    return None


@functools.lru_cache(maxsize=4096)
def _is_quantity(value: str | int) -> bool:
    # Real pools repeat the same few quantities thousands of times; parsing is the cost.
    return quantity.is_quantity(value)


@functools.lru_cache(maxsize=8192)
def _text_value_problem(kind: str, value: str) -> str | None:
    size = len(value.encode())
    if size > MAX_VALUE_LENGTH:
        return f"is {size} bytes long; at most {MAX_VALUE_LENGTH} bytes are allowed"
    if kind == "version" and not is_semver(value):
        return f"{value!r} is not a semantic version (MAJOR.MINOR.PATCH, no leading zeros)"
    return None


@functools.lru_cache(maxsize=4096)
def _is_cached_dns_label(name: str) -> bool:
    return is_dns_label(name)


def _is_counter_name(name: Any) -> bool:
    # Counter names repeat on every device of a pool; names are dict keys, so hashable.
    return _is_cached_dns_label(name) if isinstance(name, str) else is_dns_label(name)


class _Collector:
    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def add(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def mapping(self, path: str, value: Any) -> dict[str, Any]:
        """`value` if it is an object (or absent); otherwise record the error and use {}."""
        if value is None or isinstance(value, dict):
            return value or {}
        self.add(path, f"must be an object (a map), not {type(value).__name__}")
        return {}

    def sequence(self, path: str, value: Any) -> list[Any]:
        """`value` if it is a list (or absent); otherwise record the error and use []."""
        if value is None or isinstance(value, list):
            return value or []
        self.add(path, f"must be a list, not {type(value).__name__}")
        return []


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _generation(obj: Mapping[str, Any]) -> int:
    generation = _as_dict(_as_dict(obj.get("spec")).get("pool")).get("generation", 0)
    return generation if isinstance(generation, int) and not isinstance(generation, bool) else 0


def _device_path(slice_path: str, index: int, device: Mapping[str, Any]) -> str:
    name = device.get("name") if isinstance(device, dict) else None
    return f"{slice_path}.spec.devices[{index}]" + (f"({name})" if name else "")


def _check_counters(out: _Collector, path: str, counters: Any) -> None:
    if not isinstance(counters, dict) or not counters:
        out.add(path, "must map 1 to 32 counter names to {value: <quantity>}")
        return
    if len(counters) > MAX_COUNTERS_PER_SET:
        out.add(path, f"has {len(counters)} counters; at most {MAX_COUNTERS_PER_SET} are allowed")
    for name, counter in counters.items():
        if not _is_counter_name(name):
            out.add(f"{path}[{name}]", "counter name must be a DNS label (lower-case letters, digits, '-')")
        value = counter.get("value") if isinstance(counter, dict) else None
        if value is None or not (isinstance(value, (str, int)) and not isinstance(value, bool) and _is_quantity(value)):
            out.add(f"{path}[{name}].value", f"{value!r} is not a quantity such as '8' or '40Gi'")


_ATTRIBUTE_KINDS = ("int", "bool", "string", "version")


def _attribute_member_problems(attribute: dict[str, Any]) -> list[tuple[str, str]]:
    """Problems of an attribute union object as (path suffix, message) pairs."""
    problems: list[tuple[str, str]] = []
    members = [key for key in _ATTRIBUTE_KINDS if key in attribute]
    unknown = sorted(set(attribute) - set(_ATTRIBUTE_KINDS))
    if unknown:
        problems.append(("", f"unknown member(s) {unknown}; use one of int, bool, string, version"))
    if len(members) != 1:
        problems.append(("", f"must set exactly one of int, bool, string, version (found {members or 'none'})"))
        return problems
    kind = members[0]
    value_type: type = type(attribute[kind])  # annotated: mypy takes a bare type(x) for unhashable (lru_cache key)
    return problems + list(_attribute_value_problems(kind, attribute[kind], value_type))


@functools.lru_cache(maxsize=16384)
def _attribute_value_problems(kind: str, value: Any, value_type: type) -> tuple[tuple[str, str], ...]:
    # value_type is part of the cache key so that True and 1 (equal, same hash) stay apart.
    if kind == "int" and (value_type is bool or not isinstance(value, int)):
        return ((".int", f"{value!r} is not an integer"),)
    if kind == "int" and not INT64_MIN <= value <= INT64_MAX:
        return ((".int", f"{value} does not fit in a signed 64-bit integer"),)
    if kind == "bool" and value_type is not bool:
        return ((".bool", f"{value!r} is not a boolean"),)
    if kind in ("string", "version"):
        if not isinstance(value, str):
            return ((f".{kind}", f"{value!r} is not a string"),)
        problem = _text_value_problem(kind, value)
        if problem:
            return ((f".{kind}", problem),)
    return ()


def _attribute_ok(attribute: Any) -> bool:
    """True when `attribute` is a well-formed union with a valid value (cached per value);
    False means "let _check_attribute find and word the problems"."""
    if not isinstance(attribute, dict) or len(attribute) != 1:
        return False
    ((kind, value),) = attribute.items()
    if kind not in _ATTRIBUTE_KINDS:
        return False
    value_type: type = type(value)  # annotated for mypy, as above
    try:
        return not _attribute_value_problems(kind, value, value_type)
    except TypeError:  # unhashable value: certainly a problem
        return False


def _check_attribute(out: _Collector, path: str, attribute: Any) -> None:
    if not isinstance(attribute, dict):
        out.add(path, "must be an object with exactly one of int, bool, string, version")
        return
    if len(attribute) == 1:
        # Fast path for well-formed unions: one cached lookup per distinct value.
        ((kind, value),) = attribute.items()
        if kind in _ATTRIBUTE_KINDS:
            value_type: type = type(value)  # annotated for mypy, as above
            try:
                problems = _attribute_value_problems(kind, value, value_type)
            except TypeError:  # unhashable value (a list or dict where a scalar belongs)
                problems = tuple(_attribute_value_problems.__wrapped__(kind, value, type(value)))
            for suffix, message in problems:
                out.add(f"{path}{suffix}", message)
            return
    for suffix, message in _attribute_member_problems(attribute):
        out.add(f"{path}{suffix}", message)


def _check_request_policy(out: _Collector, path: str, policy: Any, value: Any) -> None:
    """The API server's CapacityRequestPolicy rules (k8s.io/api resource/v1 validation): default, then validValues or validRange."""
    if not isinstance(policy, dict):
        out.add(path, "must be an object with default and validValues or validRange")
        return
    default = _policy_amount(out, f"{path}.default", policy.get("default"))
    values, span = policy.get("validValues"), policy.get("validRange")
    if values is not None and span is not None:
        out.add(path, "may set validValues or validRange, not both")
        return
    if default is None:
        if policy.get("default") is None and (values is not None or span is not None):
            out.add(f"{path}.default", "is required with validValues or validRange")
        return  # not a quantity: left to the allocator, which names the field
    if default > value:
        out.add(f"{path}.default", "must not exceed the capacity's value")
    if values is not None:
        amounts = [_policy_amount(out, f"{path}.validValues", v) for v in values] if isinstance(values, list) else [None]
        known = [amount for amount in amounts if amount is not None]
        if len(known) < len(amounts):
            return
        # An empty list lacks the default (it crashed on known[-1] before).
        if len(known) > 10 or known != sorted(set(known)) or default not in known or known[-1] > value:
            out.add(f"{path}.validValues", "must be at most 10 ascending quantities, none above the value, one of them the default")
    elif isinstance(span, dict):
        low = _policy_amount(out, f"{path}.validRange.min", span.get("min"))
        high = _policy_amount(out, f"{path}.validRange.max", span.get("max")) if span.get("max") is not None else None
        step = _policy_amount(out, f"{path}.validRange.step", span.get("step")) if span.get("step") is not None else None
        if low is None or (span.get("max") is not None and high is None) or (span.get("step") is not None and step is None):
            return
        if not low <= default or (high is not None and not default <= high <= value):
            out.add(f"{path}.validRange", "must keep min <= default <= max <= the capacity's value")
        if step is not None and (step <= 0 or low + step > value or any((x - low) % step for x in (default, high) if x is not None)):
            out.add(f"{path}.validRange.step", "must be positive, min + step must fit the value, and default and max must be min plus whole steps")
    elif span is not None:
        out.add(f"{path}.validRange", "must be an object with min, and optional max and step")


def _policy_amount(out: _Collector, path: str, raw: Any) -> Decimal | None:
    """The amount, or None when absent or not a quantity (explain rules such a device out naming the field)."""
    if raw is None or not (isinstance(raw, (str, int)) and not isinstance(raw, bool) and _is_quantity(raw)):
        return None
    return quantity.parse(raw)


def _check_device(out: _Collector, path: str, device: Any) -> None:
    if not isinstance(device, dict):
        out.add(path, "must be an object")
        return
    name = device.get("name")
    if not is_dns_label(name):
        out.add(f"{path}.name", f"{name!r} must be a DNS label: at most {MAX_DNS_LABEL} lower-case letters, digits and '-'")
    attributes = out.mapping(f"{path}.attributes", device.get("attributes"))
    capacity = out.mapping(f"{path}.capacity", device.get("capacity"))
    total = len(attributes) + len(capacity)
    if total > MAX_ATTRIBUTES_AND_CAPACITIES:
        out.add(path, f"has {total} attributes and capacities together; at most {MAX_ATTRIBUTES_AND_CAPACITIES} are allowed")
    for key, attribute in attributes.items():
        problem = qualified_name_problem(key)
        if problem:
            out.add(f"{path}.attributes[{key}]", f"attribute name {problem}")
        if _attribute_ok(attribute):
            continue  # the common case: no field path to format
        _check_attribute(out, f"{path}.attributes[{key}]", attribute)
    for key, entry in capacity.items():
        problem = qualified_name_problem(key)
        if problem:
            out.add(f"{path}.capacity[{key}]", f"capacity name {problem}")
        value = entry.get("value") if isinstance(entry, dict) else None
        if value is None or not (isinstance(value, (str, int)) and not isinstance(value, bool) and _is_quantity(value)):
            out.add(f"{path}.capacity[{key}].value", f"{value!r} is not a quantity such as '80Gi' or '132'")
        elif isinstance(entry, dict) and entry.get("requestPolicy") is not None:
            if device.get("allowMultipleAllocations") is not True:
                out.add(f"{path}.capacity[{key}].requestPolicy", "is allowed only on a device with allowMultipleAllocations: true")
            else:
                _check_request_policy(out, f"{path}.capacity[{key}].requestPolicy", entry["requestPolicy"], quantity.parse(str(value)))
    consumptions = out.sequence(f"{path}.consumesCounters", device.get("consumesCounters"))
    if len(consumptions) > MAX_CONSUMPTIONS_PER_DEVICE:
        out.add(f"{path}.consumesCounters", f"has {len(consumptions)} entries; at most {MAX_CONSUMPTIONS_PER_DEVICE} are allowed")
    seen_sets: set[str] = set()
    for index, consumption in enumerate(consumptions):
        cpath = f"{path}.consumesCounters[{index}]"
        counter_set = consumption.get("counterSet") if isinstance(consumption, dict) else None
        if not is_dns_label(counter_set):
            out.add(f"{cpath}.counterSet", f"{counter_set!r} must name a counter set (a DNS label)")
        elif counter_set in seen_sets:
            out.add(f"{cpath}.counterSet", f"{counter_set!r} appears twice; each counter set may be consumed once")
        seen_sets.add(str(counter_set))
        _check_counters(out, f"{cpath}.counters", consumption.get("counters") if isinstance(consumption, dict) else None)
    taints = out.sequence(f"{path}.taints", device.get("taints"))
    if len(taints) > MAX_TAINTS:
        out.add(f"{path}.taints", f"has {len(taints)} taints; at most {MAX_TAINTS} are allowed")
    for index, taint in enumerate(taints):
        tpath = f"{path}.taints[{index}]"
        if not isinstance(taint, dict):
            out.add(tpath, "must be an object with key, effect and optional value")
            continue
        problem = label_key_problem(taint.get("key"))
        if problem:
            out.add(f"{tpath}.key", problem)
        value = taint.get("value", "")
        if not is_label_value(value):
            out.add(f"{tpath}.value", f"{value!r} must be a label value (at most {MAX_LABEL_VALUE} characters)")
        if taint.get("effect") not in TAINT_EFFECTS:
            out.add(f"{tpath}.effect", f"{taint.get('effect')!r} must be one of {', '.join(TAINT_EFFECTS)}")


def _check_pool_ref(out: _Collector, path: str, pool: Any) -> None:
    if not isinstance(pool, dict):
        out.add(path, "must be an object with name, generation and resourceSliceCount")
        return
    problem = pool_name_problem(pool.get("name"))
    if problem is not None:
        out.add(f"{path}.name", problem)
    generation = pool.get("generation", 0)
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        out.add(f"{path}.generation", f"{generation!r} must be an integer >= 0")
    count = pool.get("resourceSliceCount")
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        out.add(f"{path}.resourceSliceCount", f"{count!r} must be an integer > 0")


def slice_label(obj: Mapping[str, Any], index: int) -> str:
    metadata = _as_dict(obj.get("metadata"))
    name = metadata.get("name") or metadata.get("generateName")
    return f"ResourceSlice {name}" if name else f"ResourceSlice[{index}]"


def slice_errors(obj: Any, label: str = "ResourceSlice") -> list[FieldError]:
    """Every rule one ResourceSlice breaks on its own (pool-wide rules: pool_errors)."""
    out = _Collector()
    if not isinstance(obj, dict) or not isinstance(obj.get("spec"), Mapping):
        out.add(label, "must be an object with a spec")
        return out.errors
    spec = obj["spec"]
    problem = driver_name_problem(spec.get("driver"))
    if problem:
        out.add(f"{label}.spec.driver", problem)
    _check_pool_ref(out, f"{label}.spec.pool", spec.get("pool"))
    selectors = [key for key in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(key) not in (None, False, "")]
    node_name = spec.get("nodeName")
    if node_name not in (None, "") and not is_dns_subdomain(node_name):
        out.add(f"{label}.spec.nodeName", f"{node_name!r} must be a node name (a lower-case DNS subdomain)")
    if len(selectors) != 1:
        out.add(f"{label}.spec", f"exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection must be set (found {selectors or 'none'})")
    devices = out.sequence(f"{label}.spec.devices", spec.get("devices"))
    counter_sets = out.sequence(f"{label}.spec.sharedCounters", spec.get("sharedCounters"))
    if devices and counter_sets:
        out.add(f"{label}.spec", "a slice may carry devices or sharedCounters, not both; put counter sets in their own slice of the pool")
    if len(counter_sets) > MAX_COUNTER_SETS:
        out.add(f"{label}.spec.sharedCounters", f"has {len(counter_sets)} counter sets; at most {MAX_COUNTER_SETS} are allowed per slice")
    for index, counter_set in enumerate(counter_sets):
        cpath = f"{label}.spec.sharedCounters[{index}]"
        name = counter_set.get("name") if isinstance(counter_set, dict) else None
        if not is_dns_label(name):
            out.add(f"{cpath}.name", f"{name!r} must be a DNS label")
        _check_counters(out, f"{cpath}.counters", counter_set.get("counters") if isinstance(counter_set, dict) else None)
    advanced = any(isinstance(d, dict) and (d.get("taints") or d.get("consumesCounters")) for d in devices)
    limit = MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES
    if len(devices) > limit:
        reason = " because a device has taints or consumes counters" if advanced else ""
        out.add(f"{label}.spec.devices", f"has {len(devices)} devices; at most {limit} are allowed{reason}; split the pool into more slices")
    seen: set[str] = set()
    for index, device in enumerate(devices):
        path = _device_path(label, index, device)
        _check_device(out, path, device)
        name = device.get("name") if isinstance(device, dict) else None
        if isinstance(name, str):
            if name in seen:
                out.add(f"{path}.name", f"device name {name!r} is used twice in this slice")
            seen.add(name)
    return out.errors


def _pool_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    spec = _as_dict(obj.get("spec"))
    return (str(spec.get("driver")), str(_as_dict(spec.get("pool")).get("name")))


def pool_errors(slices: Sequence[Mapping[str, Any]]) -> list[FieldError]:
    """Rules that span the slices of a pool: unique names, counter references, slice counts."""
    out = _Collector()
    pools: dict[tuple[str, str], list[tuple[int, Mapping[str, Any]]]] = {}
    for index, obj in enumerate(slices):
        if isinstance(obj, dict) and isinstance(obj.get("spec"), Mapping):
            pools.setdefault(_pool_key(obj), []).append((index, obj))
    for (driver, pool), members in pools.items():
        ppath = f"pool {driver}/{pool}"
        top = max(_generation(obj) for _, obj in members)
        current = [(i, o) for i, o in members if _generation(o) == top]
        counts = {_as_dict(o["spec"].get("pool")).get("resourceSliceCount") for _, o in current}
        if len(counts) > 1:
            out.add(ppath, f"slices of generation {top} disagree on resourceSliceCount ({sorted(map(str, counts))})")
        elif counts and isinstance(count := next(iter(counts)), int) and len(current) > count:
            out.add(ppath, f"has {len(current)} slices at generation {top} but resourceSliceCount says {count}")
        # keyed by the names as written (any JSON value: the per-slice rules report a name that is not a DNS label)
        counter_sets: dict[Any, set[str]] = {}
        device_names: dict[Any, str] = {}
        for index, obj in current:
            label = slice_label(obj, index)
            for counter_set in _as_list(obj["spec"].get("sharedCounters")):
                if not isinstance(counter_set, dict):
                    continue
                name = counter_set.get("name")
                if name in counter_sets:
                    out.add(f"{label}.spec.sharedCounters({name})", f"counter set {name!r} is defined twice in {ppath}")
                counter_sets[name] = set(_as_dict(counter_set.get("counters")).keys())
            for device in _as_list(obj["spec"].get("devices")):
                if not isinstance(device, dict):
                    continue
                name = device.get("name")
                if name in device_names:
                    out.add(
                        f"{label}.spec.devices({name})",
                        f"device name {name!r} is also used in {device_names[name]}; names must be unique in {ppath}",
                    )
                device_names.setdefault(name, label)
        for index, obj in current:
            label = slice_label(obj, index)
            for device in _as_list(obj["spec"].get("devices")):
                for consumption in _as_list(_as_dict(device).get("consumesCounters")):
                    if not isinstance(consumption, dict):
                        continue
                    set_name = consumption.get("counterSet")
                    cpath = f"{label}.spec.devices({device.get('name')}).consumesCounters({set_name})"
                    if set_name not in counter_sets:
                        out.add(cpath, f"counter set {set_name!r} is not defined in {ppath}")
                        continue
                    missing = sorted(set(_as_dict(consumption.get("counters")).keys()) - counter_sets[set_name])
                    if missing:
                        out.add(cpath, f"counters {missing} do not exist in counter set {set_name!r}")
    return out.errors


def validate_slices(slices: Iterable[Mapping[str, Any]], subject: str = "ResourceSlices") -> None:
    """Raise ValidationError listing every problem in these slices and their pools."""
    items = list(slices)
    errors: list[FieldError] = []
    for index, obj in enumerate(items):
        errors.extend(slice_errors(obj, slice_label(obj, index) if isinstance(obj, dict) else f"ResourceSlice[{index}]"))
    errors.extend(pool_errors(items))
    if errors:
        raise ValidationError(errors, subject)
