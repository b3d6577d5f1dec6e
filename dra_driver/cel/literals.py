"""Literal values of a parsed selector, decoded once at compile time."""

from __future__ import annotations

from typing import Any, cast

import lark
from celpy import celtypes
from celpy.evaluation import Evaluator

__all__ = ["constant_string", "literal_values"]


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
