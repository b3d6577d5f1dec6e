"""Small readers of cel-python parse-tree nodes, shared by analysis, type checks and the compiler."""

from __future__ import annotations

from collections.abc import Container
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


def arguments(node: lark.Tree, index: int) -> list[lark.Tree]:
    """The expressions of the exprlist/mapinits child at `index` (none when the list is empty)."""
    if len(node.children) > index and isinstance(node.children[index], lark.Tree):
        return cast(list[lark.Tree], node.children[index].children)
    return []


def method_call(node: lark.Tree, bound: Container[str]) -> tuple[lark.Tree, str, list[lark.Tree], str | None]:
    """A member_dot_arg node as (receiver, method, arguments, namespaced function name).

    The last is `sets.contains` for `sets.contains(a, b)`: a call of a namespaced global
    function, unless a variable in `bound` shadows the namespace; None for a method call."""
    target = cast(lark.Tree, node.children[0])
    name = str(cast(lark.Token, node.children[1]).value)
    namespace = namespace_of(target)
    qualified = f"{namespace}.{name}" if namespace is not None and namespace not in bound else None
    return target, name, arguments(node, 2), qualified
