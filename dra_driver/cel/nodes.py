"""Small readers of cel-python parse-tree nodes, shared by analysis, type checks and the compiler."""

from __future__ import annotations

from typing import Any, cast

import lark

from dra_driver.cel.library import NAMESPACES


def ident_name(tree: Any) -> str | None:
    """The name when `tree` is a bare identifier (after chain collapsing: primary(ident(IDENT)))."""
    node = tree
    while isinstance(node, lark.Tree) and len(node.children) == 1 and node.data != "ident":
        node = node.children[0]
    if isinstance(node, lark.Tree) and node.data == "ident":
        return cast(lark.Token, node.children[0]).value
    return None


def namespace_of(member_tree: lark.Tree) -> str | None:
    """`sets` in `sets.contains(...)`: the receiver names a function namespace."""
    name = ident_name(member_tree)
    return name if name in NAMESPACES else None
