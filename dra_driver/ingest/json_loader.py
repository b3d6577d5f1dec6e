"""JSON documents through pydantic-core's parser, after checks that cost a few passes at C speed.

pydantic-core (a pydantic dependency, Rust) parses ~10x faster than libyaml and
never recurses without a limit, but builds every value: the value count is
estimated first from the separators (`,` `:` `[` `{`; an over-estimate when
strings hold them), and nesting is measured on the brackets outside strings.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic_core import from_json

from dra_driver.ingest.errors import InputError
from dra_driver.ingest.limits import JSON_NODES_FACTOR, Limits
from dra_driver.ingest.text import decode, line_at

_STRUCTURE = bytes(range(256)).translate(None, b'"[]{}')  # every byte but these is dropped
_STRING = re.compile(rb'"[^"]*"?')
_POSITION = re.compile(r"at line (\d+) column (\d+)")


def estimated_values(raw: bytes) -> int:
    return raw.count(b",") + raw.count(b":") + raw.count(b"[") + raw.count(b"{") + 1


def _deeper_than(raw: bytes, limit: int) -> bool:
    """Whether brackets outside strings nest deeper than `limit` (linear; no recursion)."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    if b"\\" in raw:  # escaped backslashes, then escaped quotes: what is left of a string is "..."
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    # Only quotes and brackets are kept; dropping adjacent quotes ("" = an empty string, or the end
    # of one string and the start of the next) leaves only strings holding brackets, which are rare.
    structure = raw.translate(None, _STRUCTURE).replace(b'""', b"")
    if b'"' in structure:
        structure = _STRING.sub(b"", structure)
    brackets = structure.translate(bytes.maketrans(b"{}", b"[]"))
    # Each pass drops the innermost pairs: a pair still left after `limit` passes
    # closed a subtree more than `limit` levels deep.
    for _ in range(limit):
        shorter = brackets.replace(b"[]", b"")
        if shorter == brackets:
            break
        brackets = shorter
    if b"[]" in brackets:
        return True
    depth = 0
    for char in brackets:  # no pairs left, only unbalanced brackets: count unclosed openers
        depth = depth + 1 if char == 0x5B else max(depth - 1, 0)
        if depth > limit:
            return True
    return False


def _first_deep_line(raw: bytes, limit: int) -> int | None:
    depth = 0
    for match in re.finditer(rb'"(?:[^"\\]|\\.)*"|[\[{]|[\]}]', raw):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return line_at(raw, match.start())
        elif token in (b"]", b"}"):
            depth = max(depth - 1, 0)
    return None


def load_json(raw: bytes, name: str, limits: Limits) -> Any:
    """The value of the JSON text `raw`; InputError naming line and column of a problem."""
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    estimate = estimated_values(raw)
    if estimate > limits.max_json_values:
        raise InputError.at(
            name,
            f"holds about {estimate:,} JSON values, more than the {limits.max_json_values:,} this command reads "
            "within its time and memory budget" + limits.refusal("--max-input-nodes", str(-(-estimate // JSON_NODES_FACTOR))),
        )
    if _deeper_than(raw, limits.max_depth):
        raise InputError.at(
            name, f"nests deeper than {limits.max_depth} levels; no Kubernetes object needs that many", line=_first_deep_line(raw, limits.max_depth)
        )
    try:
        return from_json(raw, allow_inf_nan=False)  # NaN and Infinity are not JSON (the API server refuses them)
    except ValueError as exc:
        decode(raw, name)  # a clearer message when the bytes are not text at all
        found = _POSITION.search(str(exc))
        line = int(found.group(1)) if found else None
        message = _POSITION.sub("", str(exc)).strip()
        raise InputError.at(name, f"is not valid JSON: {message}" + (f" (column {found.group(2)})" if found else ""), line=line) from exc
