"""Static work on a parsed selector: simplify, check, and find the device keys it reads.

cel-python has no type checker, so the checks Kubernetes does at compile time that matter
most are done here: undeclared functions and fields, macro arity, features Kubernetes has
but this implementation does not (CelNotSupported), and a nesting-depth limit that keeps
evaluation far from Python's recursion limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast

import lark

from dra_driver.cel.environment import BASE_DEVICE_FIELDS
from dra_driver.cel.nodes import ident_name, namespace_of
from dra_driver.cel.library import GLOBALS, METHODS, NOT_SUPPORTED, TYPE_NAMES
from dra_driver.cel.literals import constant_string
from dra_driver.cel.typecheck import TypeCheckError, check_types

# Single-child nodes of these kinds only forward their child's value; removing them makes
# trees ~8x shallower and evaluation faster without changing any result.
_CHAIN = frozenset({"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication", "unary", "member"})
MAX_DEPTH = 120  # nesting levels after collapsing; the Python stack needs ~3 frames per level
_MACRO_ARITY = {
    "all": (2, 3),
    "exists": (2, 3),
    "exists_one": (2,),
    "existsOne": (2, 3),
    "map": (2, 3),
    "filter": (2,),
    "transformList": (3, 4),
}


class AnalysisError(Exception):
    """A static problem; `supported` is False when Kubernetes would accept the expression."""

    def __init__(self, message: str, supported: bool = True) -> None:
        super().__init__(message)
        self.supported = supported


def raw_depth(tree: lark.Tree) -> int:
    """Depth of the parse tree, computed without recursion (the tree may be very deep)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((c, depth + 1) for c in node.children if isinstance(c, lark.Tree))
    return deepest


def collapse(tree: lark.Tree) -> lark.Tree:
    """Replace single-child chain nodes by their child, in place; returns the new root.

    Node names become plain str: lark's Token.__eq__ is Python-level and dominated
    evaluation time in comparisons like `tree.data == "ident"`.
    """
    while tree.data in _CHAIN and len(tree.children) == 1 and isinstance(tree.children[0], lark.Tree):
        tree = tree.children[0]
    stack = [tree]
    while stack:
        node = stack.pop()
        node.data = str(node.data)
        for i, child in enumerate(node.children):
            if not isinstance(child, lark.Tree):
                continue
            while child.data in _CHAIN and len(child.children) == 1 and isinstance(child.children[0], lark.Tree):
                child = child.children[0]
            node.children[i] = child
            stack.append(child)
    return tree


def check(tree: lark.Tree, device_fields: frozenset[str] = BASE_DEVICE_FIELDS) -> None:
    """Raise AnalysisError for what Kubernetes rejects at compile time or we cannot run,
    including static type errors (typecheck.py) and invalid constant regular expressions.

    `device_fields` are the fields the environment declares on `device` (environment.py)."""
    if raw_depth(tree) > MAX_DEPTH:
        raise AnalysisError(f"expression nesting is deeper than {MAX_DEPTH} levels")
    _check(tree, frozenset(), device_fields)
    try:
        check_types(tree)
    except TypeCheckError as exc:
        raise AnalysisError(str(exc)) from exc


def _check(node: lark.Tree, bound: frozenset[str], fields: frozenset[str]) -> None:
    if node.data == "member_dot_arg":
        _check_member_call(node, bound, fields)
        return
    if node.data == "primary" and isinstance(node.children[0], lark.Tree) and node.children[0].data == "ident_arg":
        _check_global_call(node.children[0], bound, fields)
        return
    if node.data == "primary" and isinstance(node.children[0], lark.Tree) and node.children[0].data == "ident":
        name = cast(lark.Token, node.children[0].children[0]).value
        if name in TYPE_NAMES and name not in bound:
            raise AnalysisError(f"type values ({name!r}, type(x)) are valid Kubernetes CEL but not supported here", supported=False)
        if name not in bound and name != "device":
            raise AnalysisError(f"undeclared reference to {name!r} (the only variable is 'device')")
        return
    if node.data in ("dot_ident", "dot_ident_arg") or (node.data == "primary" and _child_data(node) in ("dot_ident", "dot_ident_arg")):
        raise AnalysisError("leading-dot names are not supported", supported=False)
    if node.data == "member_object":
        raise AnalysisError("message construction is not available in the DRA environment")
    if node.data == "member_dot" and ident_name(node.children[0]) == "device" and "device" not in bound:
        field = cast(lark.Token, node.children[1]).value
        if field not in fields:
            raise AnalysisError(f"undefined field '{field}' (device has {', '.join(sorted(fields))})")
    for child in node.children:
        if isinstance(child, lark.Tree):
            _check(child, bound, fields)


def _child_data(node: lark.Tree) -> str | None:
    child = node.children[0] if node.children else None
    return child.data if isinstance(child, lark.Tree) else None


def _args(call: lark.Tree, index: int) -> list[lark.Tree]:
    if len(call.children) > index and isinstance(call.children[index], lark.Tree):
        return cast(list[lark.Tree], call.children[index].children)
    return []


def _check_global_call(call: lark.Tree, bound: frozenset[str], fields: frozenset[str]) -> None:
    name = cast(lark.Token, call.children[0]).value
    args = _args(call, 1)
    if name == "has":
        if len(args) != 1 or args[0].data != "member_dot":
            raise AnalysisError("has() takes exactly one field selection, e.g. has(m.f)")
    elif name != "dyn":
        _known(name, GLOBALS)
    for arg in args:
        _check(arg, bound, fields)


def _check_member_call(call: lark.Tree, bound: frozenset[str], fields: frozenset[str]) -> None:
    target = cast(lark.Tree, call.children[0])
    name = cast(lark.Token, call.children[1]).value
    args = _args(call, 2)
    namespace = namespace_of(target)
    if namespace is not None and namespace not in bound:
        qualified = f"{namespace}.{name}"
        if qualified == "cel.bind":
            if len(args) != 3:
                raise AnalysisError("cel.bind takes three arguments: cel.bind(name, value, expr)")
            var = _variable(args[0], "cel.bind")
            _check(args[1], bound, fields)
            _check(args[2], bound | {var}, fields)
            return
        _known(qualified, GLOBALS)
        for arg in args:
            _check(arg, bound, fields)
        return
    _check(target, bound, fields)
    if name in _MACRO_ARITY:
        if len(args) not in _MACRO_ARITY[name]:
            raise AnalysisError(f"{name}() takes {' or '.join(map(str, _MACRO_ARITY[name]))} arguments, got {len(args)}")
        two_vars = name == "transformList" or (name in ("all", "exists", "existsOne") and len(args) == 3)
        names = [_variable(a, name) for a in args[: 2 if two_vars else 1]]
        if two_vars and names[0] == names[1]:
            raise AnalysisError(f"{name}(): the two iteration variables must differ")
        for arg in args[len(names) :]:
            _check(arg, bound | set(names), fields)
        return
    _known(name, METHODS)
    for arg in args:
        _check(arg, bound, fields)


def _variable(tree: lark.Tree, macro: str) -> str:
    name = ident_name(tree)
    if name is None:
        raise AnalysisError(f"{macro}(): the variable must be a simple identifier")
    return name


def _known(name: str, registry: dict[str, Any]) -> None:
    if name in registry:
        return
    if name in NOT_SUPPORTED:
        raise AnalysisError(f"function {name!r} is part of Kubernetes CEL but not implemented here", supported=False)
    raise AnalysisError(f"undeclared reference to function {name!r}")


# ---------------------------------------------------------------- referenced keys


@dataclass(frozen=True, order=True)
class ReferencedKey:
    """One device value a selector reads.

    kind "driver": device.driver (domain and name empty).
    kind "attribute"/"capacity": `domain` None means "the device's own driver domain"
    (from `device.attributes[device.driver]`); an empty `name` means "whether the domain
    exists at all" (from `"dom" in device.attributes`).
    """

    kind: Literal["driver", "attribute", "capacity"]
    domain: str | None
    name: str


class _Undeterminable(Exception):
    pass


def referenced_keys(tree: lark.Tree) -> frozenset[ReferencedKey] | None:
    """All device values the expression reads, or None when that is not statically known."""
    keys: set[ReferencedKey] = set()
    try:
        _collect(tree, keys)
    except _Undeterminable:
        return None
    return frozenset(keys)


def _collect(node: lark.Tree, keys: set[ReferencedKey]) -> None:
    if _binds_device(node):
        raise _Undeterminable()
    key = _device_access(node, keys)
    if key is not None:
        keys.add(key)
        return
    if node.data == "relation" and len(node.children) == 2 and node.children[0].data == "relation_in":
        left = cast(lark.Tree, node.children[0].children[0])
        right = cast(lark.Tree, node.children[1])
        domain = _domain_map_access(right, keys)
        name = constant_string(left)
        if domain is not None and name is not None:
            keys.add(ReferencedKey(domain[0], domain[1], name))
            return
        outer = _device_map(right)
        if outer is not None and name is not None:
            keys.add(ReferencedKey(outer, name, ""))
            return
    if ident_name(node) == "device":
        raise _Undeterminable()
    for child in node.children:
        if isinstance(child, lark.Tree):
            _collect(child, keys)


def _binds_device(node: lark.Tree) -> bool:
    """A macro or cel.bind that names a variable `device` would shadow the real one."""
    if node.data != "member_dot_arg":
        return False
    args = _args(node, 2)
    return any(ident_name(a) == "device" for a in args[:2])


def _device_access(node: lark.Tree, keys: set[ReferencedKey]) -> ReferencedKey | None:
    """Match device.driver, device.<map>[D].name and device.<map>[D]["name"]."""
    if node.data == "member_dot":
        target, field = cast(lark.Tree, node.children[0]), cast(lark.Token, node.children[1]).value
        if ident_name(target) == "device" and field == "driver":
            return ReferencedKey("driver", "", "")
        domain = _domain_map_access(target, keys)
        if domain is not None:
            return ReferencedKey(domain[0], domain[1], field)
    if node.data == "member_index":
        target, index = cast(lark.Tree, node.children[0]), cast(lark.Tree, node.children[1])
        domain = _domain_map_access(target, keys)
        name = constant_string(index)
        if domain is not None and name is not None:
            return ReferencedKey(domain[0], domain[1], name)
    return None


def _domain_map_access(node: lark.Tree, keys: set[ReferencedKey]) -> tuple[Any, str | None] | None:
    """Match device.attributes[D] / device.capacity[D] with D constant or device.driver."""
    if node.data != "member_index":
        return None
    target, index = cast(lark.Tree, node.children[0]), cast(lark.Tree, node.children[1])
    kind = _device_map(target)
    if kind is None:
        return None
    if index.data == "member_dot" and ident_name(index.children[0]) == "device" and index.children[1] == "driver":
        keys.add(ReferencedKey("driver", "", ""))
        return (kind, None)
    domain = constant_string(index)
    return (kind, domain) if domain is not None else None


def _device_map(node: lark.Tree) -> Literal["attribute", "capacity"] | None:
    """Match device.attributes / device.capacity (the outer domain maps)."""
    if node.data != "member_dot" or ident_name(node.children[0]) != "device":
        return None
    field = cast(lark.Token, node.children[1]).value
    return "attribute" if field == "attributes" else "capacity" if field == "capacity" else None
