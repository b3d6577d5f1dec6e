"""Kubernetes name rules for the identifiers the plugin receives (kubelet DRA v1 API, resource/v1 types and validation; docs/sources.md).

Each `*_problem` function returns why a value breaks its rule, or None. The
plugin builds file names and CDI device names from these values, so the rules
are also what keeps a path or a CDI name from being steered by its input:
every accepted value is ASCII, has no '/' (pool names excepted, whose '/' never
reaches a path), no '..' segment, no NUL and a bounded length.

Values are quoted with `shown()`: at most SHOWN_CHARS characters, escaped by
ascii(), so an error never echoes a megabyte or a control character.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, TypeGuard

MAX_DNS_LABEL = 63
MAX_DNS_SUBDOMAIN = 253  # object names of most kinds
MAX_QUALIFIED_NAME = 63  # the name part of a label key (after the optional 'prefix/')
MAX_LABEL_VALUE = 63
MAX_POOL_NAME = MAX_DNS_SUBDOMAIN  # PoolNameMaxLength: a node name fits
# Kubernetes writes object UIDs as RFC-4122 UUIDs (36 characters) but does not
# validate them; we accept the UUID alphabet with room to spare, never more.
MAX_UID = 128
SHOWN_CHARS = 80

# Always used with fullmatch: `$` would also match before a trailing newline ("gpu-0\n").
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")  # empty allowed
_UID = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_dns_label(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and len(value) <= MAX_DNS_LABEL and bool(_DNS_LABEL.fullmatch(value))


def is_dns_subdomain(value: str) -> bool:
    return isinstance(value, str) and len(value) <= MAX_DNS_SUBDOMAIN and bool(_DNS_SUBDOMAIN.fullmatch(value))


def is_label_value(value: object) -> TypeGuard[str]:
    """A label value (and a taint's value): empty, or alphanumerics with '-', '_' and '.' inside."""
    return isinstance(value, str) and len(value) <= MAX_LABEL_VALUE and bool(_LABEL_VALUE.fullmatch(value))


def shown(value: Any) -> str:
    """A short printable quote of `value` for an error message."""
    if not isinstance(value, str):
        return type(value).__name__
    if len(value) <= SHOWN_CHARS:
        return ascii(value)
    return f"{ascii(value[:SHOWN_CHARS])}... ({len(value)} characters)"


def _string_problem(value: Any, limit: int) -> str | None:
    if not isinstance(value, str) or not value:
        return "is empty"
    if len(value) > limit:
        return f"is {len(value)} characters long (at most {limit})"
    return None


def _pattern_problem(value: Any, limit: int, pattern: re.Pattern[str], rule: str) -> str | None:
    """Non-empty, at most `limit` characters, and matching `pattern`; `rule` says what it must be."""
    problem = _string_problem(value, limit)
    if problem is None and not pattern.fullmatch(value):
        problem = f"{shown(value)} is not {rule}"
    return problem


def dns_label_problem(value: Any) -> str | None:
    """Namespaces, request names, device names: a DNS label."""
    return _pattern_problem(
        value, MAX_DNS_LABEL, _DNS_LABEL, "a DNS label (lower-case letters, digits and '-', starting and ending with a letter or digit)"
    )


def dns_subdomain_problem(value: Any) -> str | None:
    """Object names (claims): a DNS subdomain."""
    return _pattern_problem(
        value,
        MAX_DNS_SUBDOMAIN,
        _DNS_SUBDOMAIN,
        "a DNS subdomain (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit)",
    )


def uid_problem(value: Any) -> str | None:
    """An object UID: letters, digits and '-' (the alphabet of the UUIDs Kubernetes writes)."""
    return _pattern_problem(value, MAX_UID, _UID, "a Kubernetes UID (letters, digits and '-', such as 4d1c6e0a-7a0e-4a43-9b0e-3b8c5a1f0c11)")


def request_name_problem(value: Any) -> str | None:
    """An allocation result's request: `<request>` or `<request>/<subrequest>`, each a DNS label."""
    if not isinstance(value, str) or not value:
        return "is empty"
    parts = value.split("/")
    if len(parts) > 2 or any(dns_label_problem(part) for part in parts):
        return f"{shown(value)} must be a request name or <request>/<subrequest>, each a DNS label"
    return None


def pool_name_problem(value: Any) -> str | None:
    """A pool name: at most 253 characters of DNS subdomains separated by '/'."""
    problem = _string_problem(value, MAX_POOL_NAME)
    if problem is None and not all(is_dns_subdomain(segment) for segment in value.split("/")):
        problem = f"{shown(value)} must be DNS subdomains separated by '/'"
    return problem


def share_id_problem(value: Any) -> str | None:
    """A consumable-capacity share ID: a lower-case RFC-4122 UUID (36 characters)."""
    if not isinstance(value, str) or not _UUID.fullmatch(value):
        return f"{shown(value)} is not a lower-case UUID such as 4f1c2d3e-0000-4000-8000-000000000001"
    return None


def file_stem(uid: str) -> str:
    """A file name stem for a claim UID: the UID when it is valid, else its hash (never a path of its own)."""
    if uid_problem(uid) is None:
        return uid
    return "sha256-" + hashlib.sha256(uid.encode("utf-8", "surrogatepass")).hexdigest()
