"""Deterministic, DNS-safe names for generated objects and references.

Kubernetes object names are DNS subdomains (253 chars) and claim/request names
are DNS labels (63 chars). We always stay within 63 characters so a generated
name is valid in either place; a name that would be longer keeps a readable
prefix and ends in a hash of the full name, so distinct inputs stay distinct
and the same input always gives the same name.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from dra_driver.model.names import MAX_DNS_LABEL
_HASH_LEN = 8
_INVALID_LABEL = re.compile(r"[^a-z0-9-]+")
_INVALID_SUBDOMAIN = re.compile(r"[^a-z0-9.-]+")


def _shorten(name: str, raw: str) -> str:
    if len(name) <= MAX_DNS_LABEL:  # within a DNS label's limit, a name is valid as label and subdomain
        return name
    digest = hashlib.sha256(raw.encode()).hexdigest()[:_HASH_LEN]
    head = name[: MAX_DNS_LABEL - _HASH_LEN - 1].rstrip("-.")
    return f"{head}-{digest}"


def _clean(raw: str, invalid: re.Pattern[str]) -> str:
    name = invalid.sub("-", raw.lower())
    name = re.sub(r"-{2,}", "-", name)
    return name.strip("-.") or "x"


def dns_label(*parts: str) -> str:
    """`parts` joined by '-' as a DNS label (no dots), at most 63 characters."""
    raw = "-".join(p for p in parts if p)
    return _shorten(_clean(raw, _INVALID_LABEL), raw)


def dns_subdomain(*parts: str) -> str:
    """`parts` joined by '-' as a DNS subdomain, kept within 63 characters."""
    raw = "-".join(p for p in parts if p)
    name = _clean(raw, _INVALID_SUBDOMAIN)
    name = re.sub(r"\.-|-\.", "-", name)
    name = re.sub(r"\.{2,}", ".", name)
    return _shorten(name, raw)


def spec_digest(spec: Any) -> str:
    """8 hex digits of a SHA-256 of `spec` (canonical JSON): the same spec always gives the same digest."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:_HASH_LEN]
