"""Literal values of a parsed selector, decoded once at compile time, and string literals for selectors the tools write."""

from __future__ import annotations

import json
from typing import Any, cast

import lark
from celpy import celtypes
from celpy.evaluation import Evaluator

__all__ = ["cel_string", "constant_string", "literal_values"]


def literal_values(tree: lark.Tree) -> dict[int, Any]:
    """Every literal node's value, keyed by node identity, computed once at compile time."""
    decoder = Evaluator(tree, activation=None)  # type: ignore[arg-type]  # celpy types activation as required; literals need none
    values: dict[int, Any] = {}
    stack = [tree]
    while stack:
        node = stack.pop()
        if node.data == "literal":
            values[id(node)] = decoder.literal(node)
            continue
        stack.extend(c for c in node.children if isinstance(c, lark.Tree))
    return values


def constant_string(node: lark.Tree) -> str | None:
    """The value of a plain string literal ("x" or 'x'), else None."""
    while node.data != "literal" and len(node.children) == 1 and isinstance(node.children[0], lark.Tree):
        node = node.children[0]
    if node.data != "literal":
        return None
    token = cast(lark.Token, node.children[0])
    if token.type != "STRING_LIT":
        return None
    value = Evaluator(node, activation=None).literal(node)  # type: ignore[arg-type]  # as above
    return str(value) if isinstance(value, celtypes.StringType) else None


def cel_string(value: str) -> str:
    """`value` as a double-quoted CEL string literal (migrate's and template's selectors).

    JSON's escapes (backslash, quote, newline, tab, a 4-digit unicode escape for other control characters) are
    CEL escapes; every other character stays as it is, so no surrogate pair (an escape CEL refuses) is written."""
    return json.dumps(value, ensure_ascii=False)
