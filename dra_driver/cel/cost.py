"""The API server's compile-time cost estimate for a DRA selector (cel-go checker.Cost).

Kubernetes estimates the worst-case cost of every new selector before storing it and
rejects one whose estimate exceeds the 1,000,000 budget ("estimated cost 85,555,551 exceeds
budget 1,000,000"). The estimate follows cel-go's rules with the sizes the DRA environment
declares (k8s.io/dynamic-resource-allocation/cel): driver names up to 63 characters,
attribute and capacity maps of up to 32 domains and 32 entries each, domains of 63 and
identifiers of 32 characters, attribute values of up to 64 characters; plus the
Kubernetes library estimates (apiserver cel/library/cost.go) for its functions.

Only the maximum is computed: the minimum never decides a rejection. Sizes and costs
saturate at 2^64-1 like Go's uint64 arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import cast

import lark

from dra_driver.cel.literals import constant_string
from dra_driver.cel.nodes import arguments, ident_name, method_call
from dra_driver.model.validation import MAX_ATTRIBUTES_AND_CAPACITIES, MAX_DOMAIN_LENGTH, MAX_DRIVER_NAME_LENGTH, MAX_ID_LENGTH, MAX_VALUE_LENGTH

MAX = (1 << 64) - 1
STRING_TRAVERSAL = 0.1  # common.StringTraversalCostFactor
REGEX_LENGTH = 0.25  # common.RegexStringLengthCostFactor
LIST_CREATE = 10
MAP_CREATE = 30
# Declared maximum sizes: the k8s.io/api/resource/v1 limits (model/validation.py) the DRA CEL environment declares.
DRIVER_NAME = MAX_DRIVER_NAME_LENGTH
DOMAIN = MAX_DOMAIN_LENGTH
IDENTIFIER = MAX_ID_LENGTH
ATTRIBUTE_VALUE = MAX_VALUE_LENGTH
ENTRIES = MAX_ATTRIBUTES_AND_CAPACITIES  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
_SCALARS = frozenset({"int", "uint", "double", "bool", "null", "object"})
_SIZE_PRICED = frozenset({"quantity", "isQuantity", "semver", "isSemver"})  # ceil(len(arg) x 0.1)


def _add(*values: int) -> int:
    return min(sum(values), MAX)


def _mul(left: int, right: int) -> int:
    return min(left * right, MAX)


def _factor(size: int, factor: float) -> int:
    if size >= MAX:
        return MAX
    return min(math.ceil(size * factor), MAX)


@dataclass(frozen=True)
class Info:
    """What the estimator knows of one node: its worst-case cost and result size, and its type kind."""

    cost: int
    size: int = MAX  # max length of a string, list or map; 1 for scalars; MAX when unknown
    kind: str = "dyn"  # struct | map | list | string | bytes | dyn | int | double | bool | object ...
    path: tuple[str, ...] = ()  # for device values: the declared field path ("attributes", "@values", ...)
    item: Info | None = None  # list literals: what one element looks like


# The declared `device` object: path -> (kind, max size).
_DEVICE_PATHS: dict[tuple[str, ...], tuple[str, int]] = {
    (): ("struct", MAX),
    ("driver",): ("string", DRIVER_NAME),
    ("allowMultipleAllocations",): ("bool", 1),
    ("attributes",): ("map", ENTRIES),
    ("attributes", "@keys"): ("string", DOMAIN),
    ("attributes", "@values"): ("map", ENTRIES),
    ("attributes", "@values", "@keys"): ("string", IDENTIFIER),
    ("attributes", "@values", "@values"): ("dyn", ATTRIBUTE_VALUE),
    ("capacity",): ("map", ENTRIES),
    ("capacity", "@keys"): ("string", DOMAIN),
    ("capacity", "@values"): ("map", ENTRIES),
    ("capacity", "@values", "@keys"): ("string", IDENTIFIER),
    ("capacity", "@values", "@values"): ("object", 1),
}


def _device(path: tuple[str, ...], cost: int) -> Info:
    kind, size = _DEVICE_PATHS.get(path, ("dyn", MAX))
    return Info(cost, size, kind, path)


def estimate(tree: lark.Tree) -> int:
    """The worst-case cost the API server estimates for a collapsed, checked selector tree."""
    return _Estimator().info(tree, {"device": _device((), 1)}).cost


class _Estimator:
    def info(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        handler = getattr(self, "_" + node.data, None)
        if handler is None:
            return Info(sum(self.info(c, scope).cost for c in node.children if isinstance(c, lark.Tree)))
        return cast(Info, handler(node, scope))

    # ------------------------------------------------------------ operators

    def _expr(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        parts = [self.info(cast(lark.Tree, c), scope) for c in node.children]
        if len(parts) == 1:
            return parts[0]
        condition, if_true, if_false = parts
        size = max(if_true.size, if_false.size)
        return Info(_add(condition.cost, max(if_true.cost, if_false.cost)), size, if_true.kind if if_true.kind == if_false.kind else "dyn")

    def _conditionalor(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        return self._logic(node, scope)

    def _conditionaland(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        return self._logic(node, scope)

    def _logic(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        parts = [self.info(cast(lark.Tree, c), scope) for c in node.children]
        return Info(_add(*(p.cost for p in parts)), 1, "bool")

    def _relation(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        return self._binary(node, scope)

    def _addition(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        return self._binary(node, scope)

    def _multiplication(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        return self._binary(node, scope)

    def _binary(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        if len(node.children) == 1:
            return self.info(cast(lark.Tree, node.children[0]), scope)
        op_tree, right_tree = cast(list[lark.Tree], node.children)
        left = self.info(cast(lark.Tree, op_tree.children[0]), scope)
        right = self.info(right_tree, scope)
        operator = str(op_tree.data)
        arguments = _add(left.cost, right.cost)
        if operator in ("relation_eq", "relation_ne") or (
            operator in ("relation_lt", "relation_le", "relation_gt", "relation_ge")
            and left.kind in ("string", "bytes")
            and right.kind in ("string", "bytes")
        ):
            # Comparing is O(shorter operand); scalars have size 1.
            return Info(_add(arguments, _factor(min(left.size, right.size), STRING_TRAVERSAL)), 1, "bool")
        if operator == "relation_in":
            if right.kind == "list":
                return Info(_add(arguments, right.size), 1, "bool")
            return Info(_add(arguments, 1), 1, "bool")
        if operator == "addition_add" and left.kind in ("string", "bytes", "list") and left.kind == right.kind:
            size = _add(left.size, right.size)
            if left.kind == "list":
                return Info(_add(arguments, 1), size, "list")
            return Info(_add(arguments, _factor(size, STRING_TRAVERSAL)), size, left.kind)
        kind = left.kind if left.kind == right.kind and left.kind in ("int", "uint", "double") else "dyn"
        if operator.startswith("relation"):
            kind = "bool"
        return Info(_add(arguments, 1), 1, kind)

    def _unary(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        if len(node.children) == 1:
            return self.info(cast(lark.Tree, node.children[0]), scope)
        operand = self.info(cast(lark.Tree, node.children[1]), scope)
        return Info(_add(operand.cost, 1), 1, operand.kind)

    def _member(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        return self.info(cast(lark.Tree, node.children[0]), scope)

    # ------------------------------------------------------------ selection and indexing

    def _member_dot(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        target = self.info(cast(lark.Tree, node.children[0]), scope)
        field = str(cast(lark.Token, node.children[1]).value)
        # Selecting from a map or an object costs one; from a dyn value nothing more.
        cost = _add(target.cost, 1) if target.kind in ("map", "struct") else target.cost
        if target.path or target.kind == "struct":
            step = field if target.kind == "struct" else "@values"
            return _device((*target.path, step), cost)
        return Info(cost)

    def _member_index(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        target = self.info(cast(lark.Tree, node.children[0]), scope)
        index = self.info(cast(lark.Tree, node.children[1]), scope)
        cost = _add(target.cost, index.cost, 1)
        if target.path and target.kind == "map":
            return _device((*target.path, "@values"), cost)
        if target.kind == "list" and target.item is not None:
            return replace(target.item, cost=cost)
        return Info(cost)

    # ------------------------------------------------------------ primaries

    def _primary(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        child = cast(lark.Tree, node.children[0])
        if child.data == "ident":
            name = str(cast(lark.Token, child.children[0]).value)
            bound = scope.get(name)
            return replace(bound, cost=1) if bound is not None else Info(1)
        if child.data == "ident_arg":
            name = str(cast(lark.Token, child.children[0]).value)
            args = arguments(child, 1)
            if name == "dyn":
                inner = self.info(args[0], scope)
                return replace(inner, cost=_add(inner.cost, 1))
            if name == "has":
                target = self.info(cast(lark.Tree, args[0].children[0]), scope)
                return Info(_add(target.cost, 1), 1, "bool")
            return self._call(name, None, [self.info(a, scope) for a in args])
        if child.data == "list_lit":
            items = [self.info(a, scope) for a in arguments(child, 0)]
            item = (
                Info(0, max((i.size for i in items), default=0), items[0].kind if items and all(i.kind == items[0].kind for i in items) else "dyn")
                if items
                else None
            )
            return Info(_add(LIST_CREATE, *(i.cost for i in items)), len(items), "list", item=item)
        if child.data == "map_lit":
            items = [self.info(a, scope) for a in arguments(child, 0)]
            return Info(_add(MAP_CREATE, *(i.cost for i in items)), len(items) // 2, "map")
        return self.info(child, scope)

    def _paren_expr(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        return self.info(cast(lark.Tree, node.children[0]), scope)

    def _literal(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        token = cast(lark.Token, node.children[0])
        if token.type in ("STRING_LIT", "MLSTRING_LIT", "BYTES_LIT"):
            text = constant_string(node)
            size = len(text) if text is not None else _literal_length(token.value)
            return Info(0, size, "bytes" if token.type == "BYTES_LIT" else "string")
        kinds = {"INT_LIT": "int", "UINT_LIT": "uint", "FLOAT_LIT": "double", "BOOL_LIT": "bool", "NULL_LIT": "null"}
        return Info(0, 1, kinds.get(token.type, "dyn"))

    # ------------------------------------------------------------ calls and macros

    def _member_dot_arg(self, node: lark.Tree, scope: dict[str, Info]) -> Info:
        target_tree, name, args, qualified = method_call(node, scope)
        if qualified is not None:
            return self._bind(args, scope) if qualified == "cel.bind" else self._call(qualified, None, [self.info(a, scope) for a in args])
        if name in _MACROS:
            return self._macro(name, self.info(target_tree, scope), args, scope)
        return self._call(name, self.info(target_tree, scope), [self.info(a, scope) for a in args], args)

    def _call(self, name: str, target: Info | None, args: list[Info], arg_trees: list[lark.Tree] | None = None) -> Info:
        """cel-go: the target's and arguments' costs plus the function's own estimate."""
        spent = _add(target.cost if target else 0, *(a.cost for a in args))
        own, size, kind = self._function(name, target, args, arg_trees or [])
        return Info(_add(spent, own), size, kind)

    def _function(self, name: str, target: Info | None, args: list[Info], arg_trees: list[lark.Tree]) -> tuple[int, int, str]:
        if name in _SIZE_PRICED and args:
            return (_factor(args[0].size, STRING_TRAVERSAL), 1, "object" if name in ("quantity", "semver") else "bool")
        if target is None:
            kind = {"int": "int", "uint": "uint", "double": "double", "string": "string", "bool": "bool", "size": "int"}.get(name, "dyn")
            return (1, 1 if kind in _SCALARS else MAX, kind)
        size = target.size
        if name in ("matches", "find", "findAll") and args:
            cost = _mul(_factor(_add(size, 1), STRING_TRAVERSAL), _factor(args[0].size, REGEX_LENGTH))
            return (cost, size if name != "matches" else 1, {"matches": "bool", "find": "string"}.get(name, "list"))
        if name == "contains" and args:
            return (_mul(_factor(size, STRING_TRAVERSAL), _factor(args[0].size, STRING_TRAVERSAL)), 1, "bool")
        if name in ("startsWith", "endsWith") and args:
            return (_factor(args[0].size, STRING_TRAVERSAL), 1, "bool")
        if name in ("lowerAscii", "upperAscii", "substring", "trim"):
            return (_factor(size, STRING_TRAVERSAL), size, "string")
        if name == "split":
            return (_factor(size, 2 * STRING_TRAVERSAL), size, "list")
        if name == "replace":
            return (_factor(size, 2 * STRING_TRAVERSAL), MAX, "string")
        if name in ("indexOf", "lastIndexOf", "isSorted", "sum", "max", "min"):
            if target.kind == "list":
                element = 1 + (_factor(target.item.size, STRING_TRAVERSAL) if target.item and target.item.kind == "string" else 0)
                return (_mul(size, element), 1, "int")
            return (_factor(size, STRING_TRAVERSAL), 1, "int")
        if name == "format" and args:
            return (_factor(size, STRING_TRAVERSAL), _add(size, args[0].size), "string")
        if name == "size":
            return (1, 1, "int")
        if name in ("compareTo", "major", "minor", "patch", "sign", "asInteger"):
            return (1, 1, "int")
        if name in ("isGreaterThan", "isLessThan", "isInteger"):
            return (1, 1, "bool")
        if name in ("add", "sub"):
            return (1, 1, "object")
        if name == "asApproximateFloat":
            return (1, 1, "double")
        return (1, MAX, "dyn")

    def _bind(self, args: list[lark.Tree], scope: dict[str, Info]) -> Info:
        """cel.bind: an empty-list range (10), the bound value once, then the body."""
        name = ident_name(args[0]) or ""
        value = self.info(args[1], scope)
        body = self.info(args[2], {**scope, name: replace(value, cost=1)})
        return replace(body, cost=_add(LIST_CREATE, value.cost, body.cost))

    def _macro(self, name: str, target: Info, args: list[lark.Tree], scope: dict[str, Info]) -> Info:
        """Comprehensions as cel-go expands them: range + init + result + count x (condition + step)."""
        two = name == "transformList" or (name in ("all", "exists", "existsOne") and len(args) == 3)
        names = [ident_name(a) or "" for a in args[: 2 if two else 1]]
        inner = dict(scope)
        key, value = self._iteration(target)
        if two:
            inner[names[0]], inner[names[1]] = key, value
        else:
            inner[names[0]] = key if target.kind == "map" else value
        body = [self.info(a, inner) for a in args[len(names) :]]
        count = target.size
        if name == "all":
            init, condition, step, result = 0, 2, _add(1, body[0].cost), 1
        elif name == "exists":
            init, condition, step, result = 0, 3, _add(1, body[0].cost), 1
        elif name in ("exists_one", "existsOne"):
            init, condition, step, result = 0, 0, _add(body[0].cost, 2), 2
        elif name == "filter":
            init, condition, step, result = LIST_CREATE, 0, _add(body[0].cost, 13), 1
        else:  # map, transformList: result + [expr], optionally behind a filter
            append = _add(12, body[-1].cost)
            init, condition, result = LIST_CREATE, 0, 1
            step = _add(body[0].cost, append) if len(body) == 2 else append
        cost = _add(target.cost, init, result, _mul(count, _add(condition, step)))
        if name in ("map", "filter", "transformList"):
            return Info(cost, count, "list")
        return Info(cost, 1, "bool")

    def _iteration(self, target: Info) -> tuple[Info, Info]:
        """What the loop variables look like: (key or index, value or element)."""
        if target.kind == "map" and target.path:
            return _device((*target.path, "@keys"), 1), _device((*target.path, "@values"), 1)
        if target.kind == "list":
            element = replace(target.item, cost=1) if target.item is not None else Info(1)
            return Info(1, 1, "int"), element
        return Info(1), Info(1)


_MACROS = frozenset({"all", "exists", "exists_one", "existsOne", "map", "filter", "transformList"})


def _literal_length(source: str) -> int:
    """Length of a string literal's source minus its quotes and prefix (for odd literals)."""
    body = source.lstrip("rRbB")
    quote = 3 if body[:3] in ('"""', "'''") else 1
    return max(len(body) - 2 * quote, 0)
