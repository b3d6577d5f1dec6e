"""Small edits on ruamel round-trip data that keep the comments around them.

ruamel files a full-line comment under the key *before* it (deep inside that
key's value when the value is a collection). Deleting that key would drop the
comment, although it describes what follows; these helpers move such comment
lines to the next key, or hand them back when there is no place for them yet.
"""

from __future__ import annotations

from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.scalarstring import LiteralScalarString
from ruamel.yaml.tokens import CommentToken


def _following_comments(cmap: CommentedMap, key: Any) -> list[str]:
    """Full-line comments (raw, with their indentation) filed under `key` but sitting after its line."""
    tokens = cmap.ca.items.get(key)
    if not tokens or len(tokens) < 3 or tokens[2] is None:
        return []
    _, _, rest = tokens[2].value.partition("\n")  # the first line is key's own end-of-line comment
    return [line for line in rest.splitlines() if line.strip().startswith("#")]


def eol_comment(cmap: CommentedMap, key: Any) -> str | None:
    """The end-of-line comment on `key`'s line (`# Request 1 GPU`), when its value is a scalar and it has one."""
    tokens = cmap.ca.items.get(key)
    if not tokens or len(tokens) < 3 or tokens[2] is None:
        return None
    first = tokens[2].value.partition("\n")[0].strip()
    return first if first.startswith("#") else None


def _deepest_comments(node: Any) -> list[str]:
    """Comment lines after the last scalar inside `node` (where ruamel files what follows a collection)."""
    if isinstance(node, CommentedMap) and node:
        last = list(node.keys())[-1]
        if isinstance(node[last], (CommentedMap, CommentedSeq)):
            return _deepest_comments(node[last])
        return _following_comments(node, last)
    if isinstance(node, CommentedSeq) and node:
        return _deepest_comments(node[-1])
    return []


def attach_trailing(node: Any, lines: list[str]) -> bool:
    """Put raw comment `lines` after the last scalar inside `node`; False when there is none."""
    if not lines:
        return True
    if isinstance(node, CommentedSeq) and node:
        return attach_trailing(node[-1], lines)
    if not isinstance(node, CommentedMap) or not node:
        return False
    last = list(node.keys())[-1]
    if isinstance(node[last], (CommentedMap, CommentedSeq)):
        return attach_trailing(node[last], lines)
    attach_after_key(node, last, lines)
    return True


def remove_key(cmap: CommentedMap, key: Any) -> list[str]:
    """Delete `key` (its end-of-line comment goes with it) and keep the comment lines that followed it.

    Returns the comment lines it could not place (the map is now empty); the
    caller puts them after whatever it adds or keeps next.
    """
    keys = list(cmap.keys())
    position = keys.index(key)
    value = cmap[key]
    carried = _deepest_comments(value) if isinstance(value, (CommentedMap, CommentedSeq)) else _following_comments(cmap, key)
    del cmap[key]
    cmap.ca.items.pop(key, None)
    if not carried:
        return []
    if position > 0 and attach_trailing(cmap[keys[position - 1]], carried):
        return []
    if position > 0 and not isinstance(cmap[keys[position - 1]], (CommentedMap, CommentedSeq)):
        attach_after_key(cmap, keys[position - 1], carried)
        return []
    if position < len(keys) - 1:
        column = len(carried[0]) - len(carried[0].lstrip())
        text = "\n".join(line.strip().lstrip("#").removeprefix(" ") for line in carried)
        cmap.yaml_set_comment_before_after_key(keys[position + 1], before=text, indent=column)
        return []
    return carried


def attach_after_key(cmap: CommentedMap, key: Any, lines: list[str]) -> None:
    """Put raw comment `lines` after the line of `key` (after any comment already there)."""
    text = "".join(line + "\n" for line in lines)
    tokens = cmap.ca.items.setdefault(key, [None, None, None, None])
    if tokens[2] is None:
        tokens[2] = CommentToken("\n" + text, CommentMark(0), None)
    else:
        existing = tokens[2].value
        tokens[2].value = existing + ("" if existing.endswith("\n") else "\n") + text


def to_ruamel(value: Any) -> Any:
    """Plain dicts/lists as ruamel containers, so they dump in block style with the document's indents."""
    if isinstance(value, dict):
        result = CommentedMap()
        for key, item in value.items():
            result[key] = to_ruamel(item)
        return result
    if isinstance(value, list):
        return CommentedSeq(to_ruamel(item) for item in value)
    if isinstance(value, str) and "\n" in value:
        return LiteralScalarString(value)
    return value
