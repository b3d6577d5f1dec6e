"""Checksummed JSON documents, `{"body": {...}, "checksum": sha256(canonical body)}`.

Used wherever state on disk must prove it was written whole by us: checkpoint
lines and the claim files beside CDI specs. The checksum catches
torn writes, flipped bytes and hand edits; it is not a signature against an
attacker who can write the file (root on the node can do anything anyway).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


class SignedJsonError(ValueError):
    """The document is not JSON, has no body, or its checksum does not match."""


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(body).encode()).hexdigest()


def signed_text(body: dict[str, Any]) -> str:
    """The signed document as canonical JSON text; the body is encoded once (it may hold a whole CDI spec)."""
    text = canonical(body)
    return f'{{"body":{text},"checksum":"{hashlib.sha256(text.encode()).hexdigest()}"}}'


_HEAD = b'{"body":'
_TAIL = b',"checksum":"'
_TAIL_LEN = len(_TAIL) + 64 + 2  # ,"checksum":"<64 hex digits>"}


def verified_body(raw: bytes | str | dict[str, Any]) -> dict[str, Any]:
    """The body of a signed document (raw JSON or already parsed), or SignedJsonError saying why not."""
    if isinstance(raw, dict):
        doc: Any = raw
    else:
        try:
            doc = json.loads(raw)
        except ValueError as exc:  # also bad UTF-8
            raise SignedJsonError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("body"), dict):
        raise SignedJsonError("missing 'body' object")
    if not (isinstance(raw, (bytes, str)) and _signed_as_written(raw.encode() if isinstance(raw, str) else raw, doc)):
        if doc.get("checksum") != checksum(doc["body"]):
            raise SignedJsonError("checksum mismatch")
    body: dict[str, Any] = doc["body"]
    return body


def _signed_as_written(raw: bytes, doc: dict[str, Any]) -> bool:
    """Whether `raw` is laid out as `signed_text` writes it and its body's bytes hash to its checksum: then the
    canonical re-encoding of the parsed body (most of a verification's cost, for a claim of thousands at start-up)
    is not needed. Any other layout is checked the canonical way."""
    return body_as_written(raw) is not None and doc.get("checksum") == raw[-66:-2].decode("ascii", "replace")


def body_as_written(raw: bytes) -> bytes | None:
    """The body's bytes of a document laid out as `signed_text` writes it, if they hash to its checksum; else None
    (another layout, or damage: check it with `verified_body`)."""
    if not (raw.startswith(_HEAD) and raw[-_TAIL_LEN : -_TAIL_LEN + len(_TAIL)] == _TAIL and raw.endswith(b'"}')):
        return None
    body = raw[len(_HEAD) : -_TAIL_LEN]
    return body if hashlib.sha256(body).hexdigest().encode() == raw[-66:-2] else None
