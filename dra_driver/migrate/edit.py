"""Small edits on ruamel round-trip data that keep the comments around them."""

from __future__ import annotations

from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.tokens import CommentToken


def _following_comments(cmap: CommentedMap, key: Any) -> list[str]:
    """Full-line comments ruamel filed under `key` although they sit before the next key."""
    tokens = cmap.ca.items.get(key)
    if not tokens or len(tokens) < 3 or tokens[2] is None:
        return []
    _, _, rest = tokens[2].value.partition("\n")  # the first line is key's own end-of-line comment
    return [line.strip() for line in rest.splitlines() if line.strip().startswith("#")]


def _attach_after(cmap: CommentedMap, key: Any, lines: list[str], column: int) -> None:
    text = "".join(" " * column + line + "\n" for line in lines)
    tokens = cmap.ca.items.setdefault(key, [None, None, None, None])
    if tokens[2] is None:
        tokens[2] = CommentToken("\n" + text, CommentMark(column), None)
    else:
        value = tokens[2].value
        tokens[2].value = value + ("" if value.endswith("\n") else "\n") + text


def remove_key(cmap: CommentedMap, key: Any, column: int = 0) -> None:
    """Delete `key`, keeping the comment lines that followed it (its end-of-line comment goes with it)."""
    keys = list(cmap.keys())
    position = keys.index(key)
    carried = _following_comments(cmap, key)
    del cmap[key]
    cmap.ca.items.pop(key, None)
    if not carried:
        return
    if position < len(keys) - 1:
        following = keys[position + 1]
        cmap.yaml_set_comment_before_after_key(
            following, before="\n".join(line.lstrip("#").removeprefix(" ") for line in carried), indent=column
        )
    elif position > 0 and not isinstance(cmap[keys[position - 1]], (CommentedMap, CommentedSeq)):
        _attach_after(cmap, keys[position - 1], carried, column)


def key_column(cmap: CommentedMap) -> int:
    """The column the keys of `cmap` start at (0 when unknown, e.g. a new map)."""
    line_col = getattr(cmap, "lc", None)
    try:
        return int(line_col.col) if line_col is not None and line_col.col is not None else 0
    except (TypeError, ValueError):
        return 0


def cmap(**items: Any) -> CommentedMap:
    result = CommentedMap()
    for key, value in items.items():
        result[key] = value
    return result


def to_ruamel(value: Any) -> Any:
    """Plain dicts/lists as ruamel containers, so they dump in block style with the stream's indents."""
    if isinstance(value, dict):
        result = CommentedMap()
        for key, item in value.items():
            result[key] = to_ruamel(item)
        return result
    if isinstance(value, list):
        return CommentedSeq(to_ruamel(item) for item in value)
    return value
