"""A small static type pass: the compile-time type errors the Kubernetes API server reports.

cel-go type-checks every selector before it is stored; cel-python has no checker, so
without this pass `device.driver == 1` would evaluate (to false) where Kubernetes refuses
the claim. The pass infers a type where it is statically known (literals, `device.driver`,
function results) and `dyn` everywhere else (attribute values, macro variables), and only
rejects when both sides of an operation are known and no overload exists. Anything it
cannot type stays a runtime question, so it never rejects an expression cel-go accepts.

It also validates constant regular expressions (the Kubernetes 1.29 literal validators).
"""

from __future__ import annotations

from typing import Any, Union, cast

import lark

from dra_driver.cel.nodes import ident_name, namespace_of
from dra_driver.cel.library import NAMESPACES, regex_error
from dra_driver.cel.literals import constant_string

# A type: a name ("int", "string", "Quantity", ...) or ("list", T) / ("map", K, V).
CelType = Union[str, tuple[Any, ...]]
DYN = "dyn"
NUMBERS = frozenset({"int", "uint", "double"})
_ORDERED = frozenset({"bool", "string", "bytes", "timestamp", "duration"}) | NUMBERS
# device.attributes values are dyn (int, bool, string or Semver); device.capacity values are
# declared Quantity, so `capacity < quantity(...)` is a type error at creation (the API server's DRA CEL environment).
_ATTRIBUTES: CelType = ("map", "string", ("map", "string", DYN))
_CAPACITY: CelType = ("map", "string", ("map", "string", "Quantity"))
_DEVICE_FIELDS: dict[str, CelType] = {"driver": "string", "attributes": _ATTRIBUTES, "capacity": _CAPACITY, "allowMultipleAllocations": "bool"}
# cel-go's names of the Kubernetes object types, as its error messages print them.
_OBJECT_NAMES = {"Quantity": "kubernetes.Quantity", "Semver": "kubernetes.Semver"}
_OBJECT_HINT = "; quantities and versions are ordered with a.compareTo(b) < 0, a.isLessThan(b) or a.isGreaterThan(b), not < or >"
_LITERALS = {
    "INT_LIT": "int", "UINT_LIT": "uint", "FLOAT_LIT": "double", "STRING_LIT": "string",
    "MLSTRING_LIT": "string", "BYTES_LIT": "bytes", "BOOL_LIT": "bool", "NULL_LIT": "null",
}  # fmt: skip
_GLOBAL_RESULTS: dict[str, CelType] = {
    "size": "int", "int": "int", "uint": "uint", "double": "double", "string": "string", "bytes": "bytes",
    "bool": "bool", "duration": "duration", "timestamp": "timestamp", "matches": "bool", "has": "bool",
    "quantity": "Quantity", "isQuantity": "bool", "semver": "Semver", "isSemver": "bool",
    "strings.quote": "string", "sets.contains": "bool", "sets.equivalent": "bool", "sets.intersects": "bool",
}  # fmt: skip
_METHOD_RESULTS: dict[str, CelType] = {
    "size": "int", "contains": "bool", "startsWith": "bool", "endsWith": "bool", "matches": "bool",
    "getDate": "int", "getDayOfMonth": "int", "getDayOfWeek": "int", "getDayOfYear": "int", "getFullYear": "int",
    "getMonth": "int", "getHours": "int", "getMilliseconds": "int", "getMinutes": "int", "getSeconds": "int",
    "sign": "int", "isInteger": "bool", "asInteger": "int", "asApproximateFloat": "double",
    "add": "Quantity", "sub": "Quantity", "isGreaterThan": "bool", "isLessThan": "bool", "compareTo": "int",
    "major": "int", "minor": "int", "patch": "int", "charAt": "string", "indexOf": "int", "lastIndexOf": "int",
    "lowerAscii": "string", "upperAscii": "string", "replace": "string", "split": ("list", "string"),
    "substring": "string", "trim": "string", "join": "string", "format": "string", "find": "string",
    "findAll": ("list", "string"), "isSorted": "bool",
    "all": "bool", "exists": "bool", "exists_one": "bool", "existsOne": "bool",
}  # fmt: skip
# Methods only defined on a string receiver, and those whose arguments are all strings.
_STRING_METHODS = frozenset({
    "contains", "startsWith", "endsWith", "matches", "charAt", "lowerAscii", "upperAscii", "replace",
    "split", "substring", "trim", "format", "find", "findAll",
})  # fmt: skip
_STRING_ARGUMENTS = frozenset({"contains", "startsWith", "endsWith", "matches", "find", "findAll"})
_STRING_PARSERS = frozenset({"quantity", "isQuantity", "semver", "isSemver"})
# Methods of the Kubernetes object types: the receivers they are declared on, and the argument
# types each receiver takes (Quantity.add(int) as well as Quantity.add(Quantity)).
_OBJECT_METHODS: dict[str, dict[str, frozenset[str]]] = {
    **{name: {"Quantity": frozenset({"Quantity"}), "Semver": frozenset({"Semver"})} for name in ("isGreaterThan", "isLessThan", "compareTo")},
    **{name: {"Quantity": frozenset({"Quantity", "int"})} for name in ("add", "sub")},
    **{name: {"Quantity": frozenset()} for name in ("isInteger", "asInteger", "asApproximateFloat", "sign")},
    **{name: {"Semver": frozenset()} for name in ("major", "minor", "patch")},
}
_MACROS = frozenset({"all", "exists", "exists_one", "existsOne", "map", "filter", "transformList"})


class TypeCheckError(Exception):
    """A compile-time type error, worded like cel-go's."""


def check_types(tree: lark.Tree) -> None:
    """Raise TypeCheckError when the expression does not type-check or is statically non-bool."""
    result = _Checker().infer(tree, {})
    if result not in (DYN, "bool"):
        raise TypeCheckError(f"must evaluate to bool or the unknown type, not {_name(result)}")


def _name(kind: CelType) -> str:
    if isinstance(kind, tuple):
        return f"{kind[0]}({', '.join(_name(k) for k in kind[1:])})"
    return _OBJECT_NAMES.get(kind, kind)


def compatible(left: CelType, right: CelType) -> bool:
    """Whether cel-go can unify the two types (dyn and null unify with anything here)."""
    if left in (DYN, "null") or right in (DYN, "null"):
        return True
    if isinstance(left, tuple) and isinstance(right, tuple):
        return left[0] == right[0] and len(left) == len(right) and all(compatible(a, b) for a, b in zip(left[1:], right[1:]))
    return left == right


def _join(left: CelType, right: CelType) -> CelType:
    """The more general of two compatible types."""
    if left == right:
        return left
    if isinstance(left, tuple) and isinstance(right, tuple):
        return (left[0], *(_join(a, b) for a, b in zip(left[1:], right[1:])))
    return DYN


def _trees(node: lark.Tree) -> list[lark.Tree]:
    return [c for c in node.children if isinstance(c, lark.Tree)]


def _args(call: lark.Tree, index: int) -> list[lark.Tree]:
    if len(call.children) > index and isinstance(call.children[index], lark.Tree):
        return cast(list[lark.Tree], call.children[index].children)
    return []


class _Checker:
    def infer(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        method = getattr(self, f"_{node.data}", None)
        if method is None:
            for child in _trees(node):
                self.infer(child, scope)
            return DYN
        return cast(CelType, method(node, scope))

    # ------------------------------------------------------------ operators

    def _expr(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        parts = _trees(node)
        if len(parts) == 1:
            return self.infer(parts[0], scope)
        condition, left, right = (self.infer(p, scope) for p in parts)
        self._require_bool(condition, "_?_:_")
        if not compatible(left, right):  # cel-go declares _?_:_ as (bool, A, A) -> A
            raise TypeCheckError(f"found no matching overload for '_?_:_' applied to '({_name(condition)}, {_name(left)}, {_name(right)})'")
        return _join(left, right)

    def _conditionalor(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        return self._logic(node, scope, "||")

    def _conditionaland(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        return self._logic(node, scope, "&&")

    def _logic(self, node: lark.Tree, scope: dict[str, CelType], symbol: str) -> CelType:
        parts = _trees(node)
        if len(parts) == 1:
            return self.infer(parts[0], scope)
        for part in parts:
            self._require_bool(self.infer(part, scope), f"_{symbol}_")
        return "bool"

    @staticmethod
    def _require_bool(kind: CelType, function: str) -> None:
        """`function` is cel-go's name for the operator: _&&_, _||_, !_, _?_:_."""
        if kind not in (DYN, "bool"):
            raise TypeCheckError(f"found no matching overload for '{function}' applied to '({_name(kind)})' (an operand must be bool)")

    def _relation(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        return self._binary(node, scope)

    def _addition(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        return self._binary(node, scope)

    def _multiplication(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        return self._binary(node, scope)

    def _binary(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        parts = _trees(node)
        if len(parts) == 1:
            return self.infer(parts[0], scope)
        op_tree, right_tree = parts
        op = op_tree.data
        left = self.infer(_trees(op_tree)[0], scope)
        right = self.infer(right_tree, scope)
        symbol = {"relation_lt": "<", "relation_le": "<=", "relation_gt": ">", "relation_ge": ">=", "relation_eq": "==",
                  "relation_ne": "!=", "relation_in": "in", "addition_add": "+", "addition_sub": "-",
                  "multiplication_mul": "*", "multiplication_div": "/", "multiplication_mod": "%"}[op]  # fmt: skip
        result = _operator_result(symbol, left, right)
        if result is None:
            function = "@in" if symbol == "in" else f"_{symbol}_"  # cel-go's operator function names
            hint = _OBJECT_HINT if symbol in ("<", "<=", ">", ">=") and {left, right} & set(_OBJECT_NAMES) else ""
            raise TypeCheckError(f"found no matching overload for '{function}' applied to '({_name(left)}, {_name(right)})'{hint}")
        return result

    def _unary(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        parts = _trees(node)
        if len(parts) == 1:
            return self.infer(parts[0], scope)
        op_tree, operand_tree = parts
        operand = self.infer(operand_tree, scope)
        if op_tree.data == "unary_not":
            self._require_bool(operand, "!_")
            return "bool"
        if operand not in (DYN, "int", "double", "duration"):
            raise TypeCheckError(f"found no matching overload for '-_' applied to '({_name(operand)})'")
        return operand

    # ------------------------------------------------------------ member access

    def _member_dot(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        target_tree = cast(lark.Tree, node.children[0])
        field = cast(lark.Token, node.children[1]).value
        target = self.infer(target_tree, scope)
        if target == "device":
            return _DEVICE_FIELDS.get(field, DYN)  # unknown fields are rejected by analysis
        if isinstance(target, tuple) and target[0] == "map":
            if not compatible(target[1], "string"):
                raise TypeCheckError(f"field selection .{field} on {_name(target)}")
            return cast(CelType, target[2])
        if target in (DYN, "null"):
            return DYN
        raise TypeCheckError(f"type {_name(target)} does not support field selection (.{field})")

    def _member_index(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        target_tree, index_tree = _trees(node)
        target = self.infer(target_tree, scope)
        index = self.infer(index_tree, scope)
        if target == "device":
            raise TypeCheckError(
                "found no matching overload for '_[_]' applied to device: it is an object, use device.driver, device.attributes, device.capacity"
            )
        no_overload = f"found no matching overload for '_[_]' applied to '({_name(target)}, {_name(index)})'"
        if isinstance(target, tuple) and target[0] == "list":
            if index not in (DYN, "int"):
                raise TypeCheckError(no_overload)
            return cast(CelType, target[1])
        if isinstance(target, tuple) and target[0] == "map":
            if not compatible(target[1], index):
                raise TypeCheckError(no_overload)
            return cast(CelType, target[2])
        if target in (DYN, "null"):
            return DYN
        raise TypeCheckError(no_overload)

    # ------------------------------------------------------------ primaries

    def _primary(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        child = node.children[0]
        return self.infer(child, scope) if isinstance(child, lark.Tree) else DYN

    def _paren_expr(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        return self.infer(_trees(node)[0], scope)

    def _literal(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        return _LITERALS.get(cast(lark.Token, node.children[0]).type, DYN)

    def _ident(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        name = cast(lark.Token, node.children[0]).value
        if name in scope:
            return scope[name]
        return "device" if name == "device" else DYN

    def _list_lit(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        items = _args(node, 0)
        return ("list", self._homogeneous([self.infer(i, scope) for i in items], "list"))

    def _map_lit(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        entries = _args(node, 0)
        kinds = [self.infer(e, scope) for e in entries]
        return ("map", self._homogeneous(kinds[0::2], "map key"), self._homogeneous(kinds[1::2], "map value"))

    @staticmethod
    def _homogeneous(kinds: list[CelType], what: str) -> CelType:
        """Kubernetes enables HomogeneousAggregateLiterals: `[1, "a"]` does not compile."""
        joined: CelType | None = None
        for kind in kinds:
            if joined is None:
                joined = kind
            elif not compatible(joined, kind):
                raise TypeCheckError(f"heterogeneous {what} literal: {_name(joined)} and {_name(kind)} mixed (Kubernetes requires one element type)")
            else:
                joined = _join(joined, kind)
        return DYN if joined is None or joined == "null" else joined

    # ------------------------------------------------------------ calls and macros

    def _ident_arg(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        name = cast(lark.Token, node.children[0]).value
        args = _args(node, 1)
        kinds = [self.infer(a, scope) for a in args]
        if name == "dyn":
            return DYN
        if name in _STRING_PARSERS and kinds and kinds[0] not in (DYN, "string"):
            raise TypeCheckError(f"found no matching overload for '{name}' applied to '({_name(kinds[0])})'")
        if name == "size" and len(kinds) == 1 and not _sized(kinds[0]):
            raise TypeCheckError(f"found no matching overload for 'size' applied to '({_name(kinds[0])})'")
        if name == "matches" and len(args) == 2:
            _check_regex(args[1])
        return _GLOBAL_RESULTS.get(name, DYN)

    def _member_dot_arg(self, node: lark.Tree, scope: dict[str, CelType]) -> CelType:
        target_tree = cast(lark.Tree, node.children[0])
        name = cast(lark.Token, node.children[1]).value
        args = _args(node, 2)
        namespace = namespace_of(target_tree)
        if namespace is not None and namespace not in scope and namespace in NAMESPACES:
            if f"{namespace}.{name}" == "cel.bind" and len(args) == 3:
                variable = ident_name(args[0]) or ""
                return self.infer(args[2], {**scope, variable: self.infer(args[1], scope)})
            for arg in args:
                self.infer(arg, scope)
            return _GLOBAL_RESULTS.get(f"{namespace}.{name}", DYN)
        receiver = self.infer(target_tree, scope)
        if name in _MACROS:
            return self._macro(name, receiver, args, scope)
        if name == "format" and len(args) == 1 and _list_literal(args[0]) is not None:
            self._check_format(target_tree, cast(lark.Tree, _list_literal(args[0])), scope)
            return "string"
        kinds = [self.infer(a, scope) for a in args]
        if name == "size" and not args and not _sized(receiver):
            raise TypeCheckError(f"found no matching overload for 'size' applied to '{_name(receiver)}.()'")
        if name in _OBJECT_METHODS:
            _check_object_method(name, receiver, kinds)
        if name in _STRING_METHODS and receiver not in (DYN, "string"):
            raise TypeCheckError(f"found no matching overload for '{name}' on a {_name(receiver)} receiver")
        if name in _STRING_ARGUMENTS and any(k not in (DYN, "string") for k in kinds[:1]):
            raise TypeCheckError(f"found no matching overload for '{name}' applied to '(string, {_name(kinds[0])})'")
        if name in ("matches", "find", "findAll") and args:
            _check_regex(args[0])
        if name in ("sum", "min", "max"):
            return cast(CelType, receiver[1]) if isinstance(receiver, tuple) and receiver[0] == "list" else DYN
        return _METHOD_RESULTS.get(name, DYN)

    def _check_format(self, template_tree: lark.Tree, arguments: lark.Tree, scope: dict[str, CelType]) -> None:
        """`"%s-%d".format([...])`: the argument list is exempt from homogeneity (cel-go types it
        list(dyn)); with a constant template, cel-go's compile-time validator (ext/formatting.go,
        stringFormatValidator) walks the clauses in order, and each must accept its argument's known
        type; a list or map literal under %s is checked element by element."""
        items = _args(arguments, 0)
        kinds = [self.infer(a, scope) for a in items]
        template = constant_string(template_tree)
        if template is None:
            return
        verbs = format_verbs(template)
        if isinstance(verbs, str):
            raise TypeCheckError(verbs)
        for position, verb in enumerate(verbs):
            if position >= len(kinds):
                raise TypeCheckError(f"index {position} out of range")
            accepted, message = _FORMAT_CLAUSES[verb]
            bad = self._format_refusal(items[position], kinds[position], accepted, verb == "s", scope)
            if bad is not None:
                raise TypeCheckError(f"error during formatting: {message}, was given {bad}")
        if len(kinds) > len(verbs):
            raise TypeCheckError(f"too many arguments supplied to string.format (expected {len(verbs)}, got {len(kinds)})")

    def _format_refusal(self, item: lark.Tree, kind: CelType, accepted: frozenset[str], recurse: bool, scope: dict[str, CelType]) -> str | None:
        """cel-go's type name of the argument a clause refuses (compared by kind: list(int) is a list), else None."""
        if kind == DYN:
            return None
        base = kind[0] if isinstance(kind, tuple) else kind
        if base not in accepted:
            return _type_name(kind)
        literal = _collection_literal(item) if recurse else None
        if literal is not None:  # %s of a list or map literal: its members too
            for member in _args(literal, 0):
                bad = self._format_refusal(member, self.infer(member, scope), accepted, True, scope)
                if bad is not None:
                    return bad
        return None

    def _macro(self, name: str, receiver: CelType, args: list[lark.Tree], scope: dict[str, CelType]) -> CelType:
        two_vars = name == "transformList" or (name in ("all", "exists", "existsOne") and len(args) == 3)
        count = 2 if two_vars else 1
        variables = _iteration_types(receiver, two_vars)
        inner = {**scope, **{ident_name(a) or "": kind for a, kind in zip(args[:count], variables)}}
        body = [self.infer(a, inner) for a in args[count:]]
        if name in ("all", "exists", "exists_one", "existsOne"):
            self._require_bool(body[-1], f"{name}() predicate")
            return "bool"
        if name == "filter":
            self._require_bool(body[-1], "filter() predicate")
            return receiver if isinstance(receiver, tuple) and receiver[0] == "list" else ("list", DYN)
        if len(body) == 2:
            self._require_bool(body[0], f"{name}() filter")
        return ("list", body[-1])


def _sized(kind: CelType) -> bool:
    """size() is declared on strings, bytes, lists and maps."""
    return kind in (DYN, "string", "bytes") or (isinstance(kind, tuple) and kind[0] in ("list", "map"))


def _iteration_types(receiver: CelType, two_vars: bool) -> tuple[CelType, CelType]:
    """The types a macro's variables take over `receiver`: a list's elements (index, element), a map's keys (key, value)."""
    if isinstance(receiver, tuple) and receiver[0] == "list":
        return ("int", receiver[1]) if two_vars else (receiver[1], DYN)
    if isinstance(receiver, tuple) and receiver[0] == "map":
        return (receiver[1], receiver[2]) if two_vars else (receiver[1], DYN)
    return DYN, DYN


def _check_object_method(name: str, receiver: CelType, kinds: list[CelType]) -> None:
    """Quantity and Semver methods exist only on their own receivers, with the arguments declared for them.

    A dyn receiver (an attribute value) still needs an argument some overload takes:
    `attr.isGreaterThan("1.0.0")` matches neither (Semver, Semver) nor (Quantity, Quantity)."""
    if receiver == DYN:
        accepts: frozenset[str] | None = frozenset().union(*_OBJECT_METHODS[name].values())
        if not accepts:
            return
    else:
        accepts = _OBJECT_METHODS[name].get(receiver) if isinstance(receiver, str) else None
    if accepts is None or any(kind != DYN and kind not in accepts for kind in kinds[:1]):
        arguments = ", ".join(_name(kind) for kind in kinds)
        raise TypeCheckError(f"found no matching overload for '{name}' applied to '{_name(receiver)}.({arguments})'")


def _operator_result(symbol: str, left: CelType, right: CelType) -> CelType | None:
    """The static result of a binary operator, None when no overload exists (both sides known)."""
    if symbol in ("==", "!="):
        return "bool" if compatible(left, right) else None
    if symbol == "in":
        if right == DYN:
            return "bool"
        if isinstance(right, tuple) and right[0] in ("list", "map"):
            return "bool" if compatible(left, right[1]) else None
        return None
    if left == DYN or right == DYN:
        return "bool" if symbol in ("<", "<=", ">", ">=") else DYN
    if symbol in ("<", "<=", ">", ">="):
        same = left == right and left in _ORDERED
        return "bool" if same or (left in NUMBERS and right in NUMBERS) else None
    return _arithmetic_result(symbol, left, right)


def _arithmetic_result(symbol: str, left: CelType, right: CelType) -> CelType | None:
    if symbol == "+":
        if left == right and left in NUMBERS | {"string", "bytes", "duration"}:
            return left
        if isinstance(left, tuple) and isinstance(right, tuple) and left[0] == right[0] == "list" and compatible(left, right):
            return _join(left, right)
        if {left, right} == {"timestamp", "duration"}:
            return "timestamp"
        return None
    if symbol == "-":
        if left == right and left in NUMBERS | {"duration"}:
            return left
        if left == "timestamp":
            return {"timestamp": "duration", "duration": "timestamp"}.get(cast(str, right)) if isinstance(right, str) else None
        return None
    if symbol in ("*", "/"):
        return left if left == right and left in NUMBERS else None
    return left if left == right and left in ("int", "uint") else None  # %


# What each format() clause accepts at compile time, and cel-go's words when it does not (ext/formatting.go,
# the strings extension at version 2 that Kubernetes' base environment uses).
_FORMAT_CLAUSES: dict[str, tuple[frozenset[str], str]] = {
    "s": (frozenset({"list", "map", "int", "uint", "double", "bool", "string", "timestamp", "bytes", "duration", "type", "null"}),
          "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps"),
    "d": (frozenset({"int", "uint"}), "decimal clause can only be used on integers"),
    "f": (frozenset({"double", "string"}), "fixed-point clause can only be used on doubles"),  # strings: "NaN", "Infinity"
    "e": (frozenset({"double", "string"}), "scientific clause can only be used on doubles"),
    "b": (frozenset({"int", "uint", "bool"}), "only integers and bools can be formatted as binary"),
    "x": (frozenset({"int", "uint", "string", "bytes"}), "only integers, byte buffers, and strings can be formatted as hex"),
    "X": (frozenset({"int", "uint", "string", "bytes"}), "only integers, byte buffers, and strings can be formatted as hex"),
    "o": (frozenset({"int", "uint"}), "octal clause can only be used on integers"),
}  # fmt: skip


def _type_name(kind: CelType) -> str:
    """A type as cel-go's TypeName() prints it: list and map without parameters, null as null_type."""
    if isinstance(kind, tuple):
        return str(kind[0])
    return "null_type" if kind == "null" else _OBJECT_NAMES.get(kind, kind)


def _collection_literal(tree: lark.Tree) -> lark.Tree | None:
    node = tree
    while node.data not in ("list_lit", "map_lit") and len(node.children) == 1 and isinstance(node.children[0], lark.Tree):
        node = node.children[0]
    return node if node.data in ("list_lit", "map_lit") else None


def format_verbs(template: str) -> list[str] | str:
    """The clauses of a format() template in order (without %%), or why the template is invalid."""
    verbs: list[str] = []
    i = 0
    while i < len(template):
        if template[i] != "%":
            i += 1
            continue
        j = i + 1
        if j < len(template) and template[j] == ".":
            j += 1
            while j < len(template) and template[j].isdigit():
                j += 1
        if j >= len(template):
            return "unexpected end of string"
        verb = template[j]
        if verb != "%":
            if verb not in _FORMAT_CLAUSES:
                return f'could not parse formatting clause: unrecognized formatting clause "{verb}"'
            verbs.append(verb)
        i = j + 1
    return verbs


def _list_literal(tree: lark.Tree) -> lark.Tree | None:
    node = tree
    while node.data != "list_lit" and len(node.children) == 1 and isinstance(node.children[0], lark.Tree):
        node = node.children[0]
    return node if node.data == "list_lit" else None


def _check_regex(pattern_tree: lark.Tree) -> None:
    """Kubernetes validates constant regular expressions at compile time (RE2 syntax)."""
    pattern = constant_string(pattern_tree)
    if pattern is None:
        return
    problem = regex_error(pattern)
    if problem is not None:
        raise TypeCheckError(f"invalid regular expression {pattern!r}: {problem}")
