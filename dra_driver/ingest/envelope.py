"""Kubernetes' rules for the part every object shares: apiVersion, kind, metadata.

Checked on every object a command reads, before anything looks inside it, so a
`kind` that is a map or a 50 MB `metadata.name` is refused with the field named,
as the API server would refuse it (ObjectMeta validation, pkg/apis/core/validation).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from dra_driver.common.errors import FieldError
from dra_driver.model.names import MAX_DNS_LABEL, MAX_DNS_SUBDOMAIN, MAX_LABEL_VALUE, is_label_value
from dra_driver.model.validation import is_dns_label, is_dns_subdomain, label_key_problem

MAX_ANNOTATIONS_BYTES = 256 * 1024
# Kinds whose names the API server checks as DNS subdomains; other kinds (RBAC roles
# with ':' in names, ...) only as path segments.
DNS_SUBDOMAIN_KINDS = frozenset({
    "ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "ResourceSlice", "DeviceTaintRule",
    "Pod", "PodTemplate", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob",
    "ConfigMap", "Secret", "Node",
})
_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,62}\Z")


def _type_name(value: Any) -> str:
    return {dict: "map", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(value), type(value).__name__)


def _api_version_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a string such as resource.k8s.io/v1, not a {_type_name(value)}"
    group, _, version = value.rpartition("/")
    if not is_dns_label(version) or (group and not is_dns_subdomain(group)):
        return f"{value[:80]!r} is not GROUP/VERSION or VERSION (e.g. resource.k8s.io/v1, apps/v1, v1)"
    return None


def _name_problem(value: Any, kind: str, field: str) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, not a {_type_name(value)}"
    if len(value) > MAX_DNS_SUBDOMAIN:
        return f"is {len(value):,} characters long; at most {MAX_DNS_SUBDOMAIN} are allowed"
    if field == "generateName":
        return None
    if kind in DNS_SUBDOMAIN_KINDS and not is_dns_subdomain(value):
        return f"{value!r} must be a DNS subdomain (lower-case letters, digits, '-' and '.')"
    if value in (".", "..") or "/" in value or "%" in value:
        return f"{value!r} may not be '.' or '..' or contain '/' or '%'"
    return None


def _string_map_errors(value: Any, path: str, check_values: bool) -> list[FieldError]:
    if not isinstance(value, Mapping):
        return [FieldError(path, f"must be a map of strings, not a {_type_name(value)}")]
    out: list[FieldError] = []
    for key, item in value.items():
        problem = label_key_problem(key) if isinstance(key, str) else f"key must be a string, not a {_type_name(key)}"
        if problem:
            out.append(FieldError(f"{path}[{str(key)[:80]!r}]", problem))
        elif not isinstance(item, str):
            out.append(FieldError(f"{path}[{key!r}]", f"value must be a string (quote it), not a {_type_name(item)}"))
        elif check_values and not is_label_value(item):
            out.append(
                FieldError(
                    f"{path}[{key!r}]",
                    f"value must be at most {MAX_LABEL_VALUE} characters of [A-Za-z0-9-_.], starting and ending alphanumeric",
                )
            )
    if not check_values and not out:
        size = len(json.dumps(value))
        if size > MAX_ANNOTATIONS_BYTES:
            out.append(FieldError(path, f"total {size:,} bytes; at most {MAX_ANNOTATIONS_BYTES:,} are allowed"))
    return out


def _metadata_errors(meta: Any, kind: str) -> list[FieldError]:
    if not isinstance(meta, Mapping):
        return [FieldError("metadata", f"must be a map, not a {_type_name(meta)}")]
    out: list[FieldError] = []
    for field in ("name", "generateName"):
        if field in meta:
            problem = _name_problem(meta[field], kind, field)
            if problem:
                out.append(FieldError(f"metadata.{field}", problem))
    namespace = meta.get("namespace")
    if namespace is not None and not is_dns_label(namespace):
        rule = f"must be a DNS label (lower-case letters, digits, '-', at most {MAX_DNS_LABEL})"
        out.append(FieldError("metadata.namespace", f"{str(namespace)[:80]!r} {rule}"))
    if meta.get("labels") is not None:
        out += _string_map_errors(meta["labels"], "metadata.labels", check_values=True)
    if meta.get("annotations") is not None:
        out += _string_map_errors(meta["annotations"], "metadata.annotations", check_values=False)
    return out


def envelope_errors(obj: Any) -> list[FieldError]:
    """What is wrong with the apiVersion, kind and metadata of `obj`, with field paths."""
    if not isinstance(obj, Mapping):
        return [FieldError("", f"is a {_type_name(obj)}, not a Kubernetes object (a map with apiVersion, kind, metadata)")]
    out: list[FieldError] = []
    kind = obj.get("kind")
    if kind is not None and not (isinstance(kind, str) and _KIND.match(kind)):
        shown = f"{kind[:80]!r}" if isinstance(kind, str) else f"a {_type_name(kind)}"
        out.append(FieldError("kind", f"must be a type name such as ResourceClaim or Deployment, not {shown}"))
        kind = ""
    if "apiVersion" in obj:
        problem = _api_version_problem(obj["apiVersion"])
        if problem:
            out.append(FieldError("apiVersion", problem))
    if "metadata" in obj and obj["metadata"] is not None:
        out += _metadata_errors(obj["metadata"], str(kind or ""))
    return out
