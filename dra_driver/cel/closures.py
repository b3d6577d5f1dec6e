"""Compile a checked selector tree into nested Python closures, evaluated without walking the tree.

A tree walk pays for dispatch on every node of every evaluation; here each node becomes
one closure `fn(frame) -> value` built once per expression, with what is known statically
settled at compile time: literal values, which names are macro variables, namespaced
functions (`sets.contains`), constant calls such as `quantity("40Gi")`, and plain paths
into the device (`device.attributes["dom"].name`), which become direct dictionary reads.

Semantics are cel-go's, as before: errors are values (CELEvalError) until something
decides past them (`false && error` is false), `&&`/`||` short-circuit on the left, and
every call, selection, index and loop step spends cost units from the frame's budget,
close to what cel-go's runtime cost tracker charges, so an overrun stops at about the
same point as in Kubernetes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import lark
from celpy import celtypes
from celpy.evaluation import CELEvalError, base_functions

from dra_driver.cel.errors import CelBudgetExceeded
from dra_driver.cel.nodes import arguments, ident_name, method_call
from dra_driver.cel.library import _MISSING, GLOBALS, METHODS, OPERATORS, map_get
from dra_driver.cel.types import cel_type_name as kind_name

_BOOL_MACROS = frozenset({"all", "exists", "exists_one", "existsOne"})
_LIST_MACROS = frozenset({"map", "filter", "transformList"})
# Binary operator nodes: (operator function name, symbol for messages).
_BINARY = {
    "relation_lt": ("_<_", "<"),
    "relation_le": ("_<=_", "<="),
    "relation_gt": ("_>_", ">"),
    "relation_ge": ("_>=_", ">="),
    "relation_eq": ("_==_", "=="),
    "relation_ne": ("_!=_", "!="),
    "relation_in": ("_in_", "in"),
    "addition_add": ("_+_", "+"),
    "addition_sub": ("_-_", "-"),
    "multiplication_mul": ("_*_", "*"),
    "multiplication_div": ("_/_", "/"),
    "multiplication_mod": ("_%_", "%"),
}
_REGEX_FUNCTIONS = frozenset({"matches", "find", "findAll"})
STRING_TRAVERSAL_COST = 0.1  # cel-go common.StringTraversalCostFactor
REGEX_LENGTH_COST = 0.25  # cel-go common.RegexStringLengthCostFactor
LIST_CREATE_COST = 10  # cel-go: createListBaseCost
MAP_CREATE_COST = 30  # cel-go: createMapBaseCost
LOOP_STEP_COST = 3  # cel-go per iteration: the loop condition call + two accumulator reads
SHADOWED = "@device-shadowed"  # in `bound` once a macro or bind variable named `device` hides the root
_DEVICE_SCALARS = frozenset({"driver", "allowMultipleAllocations"})
_DEVICE_MAPS = frozenset({"attributes", "capacity"})


def budget_message(budget: int) -> str:
    """cel-go's wording (the Go tests match it), with the limit that was hit."""
    return f"operation cancelled: actual cost limit exceeded (limit {budget:,})"


class Frame:
    """One evaluation: variable bindings and the cost units left."""

    __slots__ = ("scope", "remaining", "budget", "expression", "paths")

    def __init__(self, scope: dict[str, Any], budget: int, expression: str, paths: Mapping[Any, Any] | None = None) -> None:
        self.scope = scope
        self.remaining = budget
        self.budget = budget
        self.expression = expression
        self.paths = paths  # CelDevice.paths of the root `device`, when the caller has them

    def spend(self, units: int) -> None:
        self.remaining -= units
        if self.remaining < 0:
            raise CelBudgetExceeded(self.expression, budget_message(self.budget))


Fn = Callable[[Frame], Any]


def compile_tree(tree: lark.Tree, literals: dict[int, Any]) -> Fn:
    """The closure for a collapsed, checked tree (analysis.collapse + analysis.check)."""
    return _Compiler(literals).build(tree, frozenset({"device"}))


def _error(message: str, kind: type[Exception] = TypeError, args: tuple[Any, ...] = ()) -> CELEvalError:
    return CELEvalError(message, kind, args)


def _key_text(value: Any) -> str:
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    return str(value)


class _Compiler:
    def __init__(self, literals: dict[int, Any]) -> None:
        self.literals = literals
        self.constants: dict[int, tuple[Any, int]] = {}  # id(closure) -> (value, cost) of constant closures
        self.keep: list[Fn] = []

    def build(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        method = getattr(self, "_" + node.data, None)
        if method is None:
            raise ValueError(f"internal: no compiler for CEL node {node.data!r}")
        return cast(Fn, method(node, bound))

    # ------------------------------------------------------------ structure

    def _expr(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        if len(node.children) == 1:
            return self.build(cast(lark.Tree, node.children[0]), bound)
        condition, if_true, if_false = (self.build(cast(lark.Tree, c), bound) for c in node.children)

        def ternary(frame: Frame) -> Any:
            value = condition(frame)
            if value is True or value is False or isinstance(value, celtypes.BoolType):
                return if_true(frame) if value else if_false(frame)
            if isinstance(value, CELEvalError):
                return value
            return _error(f"found no matching overload for '_?_:_' applied to '({kind_name(value)}, ...)'")

        return ternary

    def _conditionalor(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        return self._logic(node, bound, decisive=True, symbol="||")

    def _conditionaland(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        return self._logic(node, bound, decisive=False, symbol="&&")

    def _logic(self, node: lark.Tree, bound: frozenset[str], decisive: bool, symbol: str) -> Fn:
        if len(node.children) == 1:
            return self.build(cast(lark.Tree, node.children[0]), bound)
        left, right = (self.build(cast(lark.Tree, c), bound) for c in node.children)
        outcome = celtypes.BoolType(decisive)
        other = celtypes.BoolType(not decisive)

        def logic(frame: Frame) -> Any:
            a = left(frame)
            a_bool = isinstance(a, celtypes.BoolType)
            if a_bool and bool(a) is decisive:
                return outcome
            b = right(frame)
            b_bool = isinstance(b, celtypes.BoolType)
            if b_bool and bool(b) is decisive:
                return outcome
            if a_bool and b_bool:
                return other
            if isinstance(a, CELEvalError):
                return a
            if isinstance(b, CELEvalError):
                return b
            return _error(f"found no matching overload for '_{symbol}_' applied to '({kind_name(a)}, {kind_name(b)})'")

        return logic

    def _relation(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        return self._binary(node, bound)

    def _addition(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        return self._binary(node, bound)

    def _multiplication(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        return self._binary(node, bound)

    def _binary(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        if len(node.children) == 1:
            return self.build(cast(lark.Tree, node.children[0]), bound)
        op_tree, right_tree = cast(list[lark.Tree], node.children)
        left = self.build(cast(lark.Tree, op_tree.children[0]), bound)
        right = self.build(right_tree, bound)
        name, symbol = _BINARY[op_tree.data]
        function = OPERATORS[name]

        def binary(frame: Frame) -> Any:
            a = left(frame)
            b = right(frame)
            if isinstance(a, CELEvalError):
                return a
            if isinstance(b, CELEvalError):
                return b
            frame.remaining -= 1
            if frame.remaining < 0:
                frame.spend(0)
            try:
                return function(a, b)
            except TypeError as exc:
                return _error(f"found no matching overload for '_{symbol}_' applied to '({kind_name(a)}, {kind_name(b)})'", TypeError, exc.args)
            except ZeroDivisionError as exc:
                return _error("division by zero", ZeroDivisionError, exc.args)
            except (ValueError, OverflowError, ArithmeticError) as exc:
                return _error(f"{symbol}: {exc or 'overflow'}", type(exc), exc.args)

        return binary

    def _unary(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        if len(node.children) == 1:
            return self.build(cast(lark.Tree, node.children[0]), bound)
        op_tree, operand_tree = cast(list[lark.Tree], node.children)
        operand = self.build(operand_tree, bound)
        name = "!_" if op_tree.data == "unary_not" else "-_"
        function = OPERATORS.get(name) or base_functions[name]  # celpy's ! and unary - (checked int negation)

        def unary(frame: Frame) -> Any:
            value = operand(frame)
            if isinstance(value, CELEvalError):
                return value
            frame.spend(1)
            try:
                return function(value)
            except TypeError as exc:
                return _error(f"found no matching overload for '{name}' applied to '({kind_name(value)})'", TypeError, exc.args)
            except (ValueError, OverflowError) as exc:
                return _error(f"{name[0]}: {exc or 'overflow'}", type(exc), exc.args)

        return unary

    def _member(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        return self.build(cast(lark.Tree, node.children[0]), bound)

    # ------------------------------------------------------------ member access

    def _member_dot(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        target_tree = cast(lark.Tree, node.children[0])
        field = str(cast(lark.Token, node.children[1]).value)
        key = celtypes.StringType(field)
        target = self.build(target_tree, bound)
        direct = self._device_path(target_tree, field, bound)
        if direct is not None:
            return _direct_read(direct, target, key, field)

        def select(frame: Frame) -> Any:
            value = target(frame)
            if isinstance(value, dict):
                frame.spend(1)
                try:
                    return value[key]
                except KeyError:
                    return _error(f"no such key: {field}", KeyError, (field,))
            if isinstance(value, CELEvalError):
                return value
            return _error(f"type '{kind_name(value)}' does not support field selection", TypeError)

        return select

    def _member_index(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        target = self.build(cast(lark.Tree, node.children[0]), bound)
        index = self.build(cast(lark.Tree, node.children[1]), bound)
        name = self._constant(cast(lark.Tree, node.children[1]))
        if isinstance(name, str):
            direct = self._device_path(cast(lark.Tree, node.children[0]), str.__str__(name), bound)
            if direct is not None:
                return _direct_read(direct, target, celtypes.StringType(name), str.__str__(name))

        def lookup(frame: Frame) -> Any:
            container = target(frame)
            key = index(frame)
            if isinstance(container, CELEvalError):
                return container
            if isinstance(key, CELEvalError):
                return key
            frame.spend(1)
            return _index(container, key)

        return lookup

    def _member_dot_arg(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        target_tree, name, args, qualified = method_call(node, bound)
        if qualified is not None:
            return self._bind(args, bound) if qualified == "cel.bind" else self._call(qualified, GLOBALS, None, args, bound)
        if name in _BOOL_MACROS or name in _LIST_MACROS:
            return self._macro(name, target_tree, args, bound)
        return self._call(name, METHODS, self.build(target_tree, bound), args, bound)

    def _device_path(self, target: lark.Tree, field: str, bound: frozenset[str]) -> tuple[Any, int] | None:
        """(CelDevice.paths key, cost) when target.field is a plain read of the root device, else None.

        Matches device.driver / device.allowMultipleAllocations and device.<map>["domain"].<id>
        (or ["id"]) with a constant domain; anything else takes the general path."""
        if SHADOWED in bound:
            return None
        if ident_name(target) == "device":
            return (field, 1) if field in _DEVICE_SCALARS else None
        if target.data != "member_index":
            return None
        outer, domain_tree = cast(lark.Tree, target.children[0]), cast(lark.Tree, target.children[1])
        domain = self._constant(domain_tree)
        if not isinstance(domain, str) or outer.data != "member_dot" or ident_name(outer.children[0]) != "device":
            return None
        kind = str(cast(lark.Token, outer.children[1]).value)
        return ((kind, str.__str__(domain), field), 3) if kind in _DEVICE_MAPS else None

    # ------------------------------------------------------------ primaries

    def _primary(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        child = cast(lark.Tree, node.children[0])
        if child.data == "literal":
            return self._constant_fn(self.literals[id(child)], 0)
        if child.data == "paren_expr":
            return self.build(cast(lark.Tree, child.children[0]), bound)
        if child.data == "ident":
            return self._ident(str(cast(lark.Token, child.children[0]).value))
        if child.data == "ident_arg":
            name = str(cast(lark.Token, child.children[0]).value)
            args = arguments(child, 1)
            if name == "has":
                return self._has(args, bound)
            if name == "dyn":
                return self.build(args[0], bound)
            return self._call(name, GLOBALS, None, args, bound)
        if child.data == "list_lit":
            return self._list(child, bound)
        if child.data == "map_lit":
            return self._map(child, bound)
        return self.build(child, bound)

    def _literal(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        return self._constant_fn(self.literals[id(node)], 0)

    def _ident(self, name: str) -> Fn:
        def ident(frame: Frame) -> Any:
            try:
                return frame.scope[name]
            except KeyError:
                return _error(f"undeclared reference to '{name}'", KeyError, (name,))

        return ident

    def _list(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        items = [self.build(t, bound) for t in arguments(node, 0)]

        def create_list(frame: Frame) -> Any:
            frame.spend(LIST_CREATE_COST)
            values = [item(frame) for item in items]
            for value in values:
                if isinstance(value, CELEvalError):
                    return value
            return celtypes.ListType(values)

        return create_list

    def _map(self, node: lark.Tree, bound: frozenset[str]) -> Fn:
        flat = arguments(node, 0)
        pairs = [(self.build(flat[i], bound), self.build(flat[i + 1], bound)) for i in range(0, len(flat), 2)]

        def create_map(frame: Frame) -> Any:
            frame.spend(MAP_CREATE_COST)
            out = celtypes.MapType()
            for key_fn, value_fn in pairs:
                key, value = key_fn(frame), value_fn(frame)
                for part in (key, value):
                    if isinstance(part, CELEvalError):
                        return part
                if not isinstance(key, (celtypes.IntType, celtypes.UintType, celtypes.BoolType, celtypes.StringType)):
                    return _error(f"unsupported key type: {kind_name(key)}")
                if map_get(out, key) is not _MISSING:
                    return _error(f"Failed with repeated key: {_key_text(key)}", ValueError)
                dict.__setitem__(out, key, value)
            return out

        return create_map

    # ------------------------------------------------------------ calls

    def _call(
        self, name: str, registry: dict[str, Callable[..., Any]], receiver: Fn | None, arg_trees: Sequence[lark.Tree], bound: frozenset[str]
    ) -> Fn:
        function = registry.get(name)
        if function is None:
            message = f"undeclared reference to '{name}'"
            return lambda frame: _error(message, KeyError, (name,))
        args = [self.build(a, bound) for a in arg_trees]
        parts = args if receiver is None else [receiver, *args]
        folded = self._fold(function, name, parts)
        if folded is not None:
            return folded
        costed = name in _REGEX_FUNCTIONS

        def call(frame: Frame) -> Any:
            values = [part(frame) for part in parts]
            for value in values:
                if isinstance(value, CELEvalError):
                    return value
            frame.remaining -= regex_cost(values) if costed else 1
            if frame.remaining < 0:
                frame.spend(0)
            try:
                return function(*values)
            except TypeError as exc:
                kinds = ", ".join(kind_name(v) for v in values)
                detail = f": {exc}" if str(exc) else ""
                return _error(f"found no matching overload for '{name}' applied to '({kinds}){detail}'", TypeError, exc.args)
            except (ValueError, ArithmeticError, IndexError, KeyError, OverflowError) as exc:
                return _error(f"{name}: {exc}", type(exc), exc.args)

        return call

    def _fold(self, function: Callable[..., Any], name: str, parts: Sequence[Fn]) -> Fn | None:
        """A call whose receiver and arguments are all constants, evaluated once at compile time.

        CEL functions are pure, so the value is the same on every evaluation; the cost cel-go
        would charge at runtime is still spent each time. A call that fails is not folded:
        its error surfaces at evaluation, with its message, as in Kubernetes."""
        known = [self.constants.get(id(part)) for part in parts]
        if any(k is None for k in known):
            return None
        values = [k[0] for k in known if k is not None]
        try:
            value = function(*values)
        except Exception:
            return None
        if isinstance(value, CELEvalError):
            return None
        cost = (regex_cost(values) if name in _REGEX_FUNCTIONS else 1) + sum(k[1] for k in known if k is not None)
        return self._constant_fn(value, cost)

    def _constant_fn(self, value: Any, cost: int) -> Fn:
        if cost == 0:
            def constant(frame: Frame) -> Any:
                return value
        else:
            def constant(frame: Frame) -> Any:
                frame.remaining -= cost
                if frame.remaining < 0:
                    frame.spend(0)
                return value
        self.constants[id(constant)] = (value, cost)
        self.keep.append(constant)  # ids stay unique while the compiler lives
        return constant

    def _constant(self, tree: lark.Tree) -> Any:
        while tree.data in ("primary", "expr", "member") and len(tree.children) == 1 and isinstance(tree.children[0], lark.Tree):
            tree = tree.children[0]
        return self.literals.get(id(tree), _MISSING) if tree.data == "literal" else _MISSING

    def _has(self, args: Sequence[lark.Tree], bound: frozenset[str]) -> Fn:
        target = args[0]
        container_fn = self.build(cast(lark.Tree, target.children[0]), bound)
        field = celtypes.StringType(str(cast(lark.Token, target.children[1]).value))

        def has(frame: Frame) -> Any:
            container = container_fn(frame)
            if isinstance(container, CELEvalError):
                return container
            frame.spend(1)
            if isinstance(container, dict):
                return celtypes.BoolType(dict.__contains__(container, field))
            return _error(f"has(): type '{kind_name(container)}' does not support field selection")

        return has

    # ------------------------------------------------------------ macros and bind

    def _bind(self, args: Sequence[lark.Tree], bound: frozenset[str]) -> Fn:
        name = _variable(args[0])
        value_fn = self.build(args[1], bound)
        body = self.build(args[2], _binding(bound, (name,)))

        def bind(frame: Frame) -> Any:
            value = value_fn(frame)
            outer = frame.scope
            frame.scope = {**outer, name: value}
            try:
                return body(frame)
            finally:
                frame.scope = outer

        return bind

    def _macro(self, name: str, target_tree: lark.Tree, args: Sequence[lark.Tree], bound: frozenset[str]) -> Fn:
        target = self.build(target_tree, bound)
        two_vars = name == "transformList" or (name in _BOOL_MACROS and len(args) == 3)
        names = (_variable(args[0]), _variable(args[1])) if two_vars else (_variable(args[0]),)
        inner = _binding(bound, names)
        body = [self.build(a, inner) for a in args[len(names) :]]
        label = "exists_one" if name == "existsOne" else name

        def items(frame: Frame) -> Any:
            """The loop's variable values: one tuple per iteration, in `names` order."""
            container = target(frame)
            if isinstance(container, CELEvalError):
                return container
            if isinstance(container, dict):
                return list(container.items()) if two_vars else [(k,) for k in container]
            if isinstance(container, list):
                if two_vars:
                    return [(int.__new__(celtypes.IntType, i), v) for i, v in enumerate(container)]
                return [(v,) for v in container]
            return _error(f"{name}(): cannot iterate over {kind_name(container)}")

        if name in _BOOL_MACROS:
            return _quantifier(label, names, items, body[0])
        return _transform(name, names, items, body)


def regex_cost(values: Sequence[Any]) -> int:
    """What Kubernetes charges for a regular-expression call: (text length + 1) x pattern length, scaled."""
    if len(values) < 2 or not isinstance(values[0], str) or not isinstance(values[1], str):
        return 1
    text_cost = math.ceil((1 + len(values[0])) * STRING_TRAVERSAL_COST)
    return text_cost * math.ceil(len(values[1]) * REGEX_LENGTH_COST)


def _direct_read(direct: tuple[Any, int], general: Fn, key: Any, field: str) -> Fn:
    """Read a device value straight from Frame.paths; without paths, select as usual."""
    path, cost = direct

    def read(frame: Frame) -> Any:
        paths = frame.paths
        if paths is None:
            container = general(frame)
            if isinstance(container, CELEvalError):
                return container
            frame.spend(1)
            return _index(container, key)
        frame.remaining -= cost
        if frame.remaining < 0:
            frame.spend(0)
        value = paths.get(path, _MISSING)
        if value is _MISSING:
            return _error(f"no such key: {field}", KeyError, (field,))
        return value

    return read


def _quantifier(name: str, names: tuple[str, ...], items: Callable[[Frame], Any], predicate: Fn) -> Fn:
    """all/exists stop at the deciding value; an error only counts when nothing decided."""

    def quantifier(frame: Frame) -> Any:
        bindings = items(frame)
        if isinstance(bindings, CELEvalError):
            return bindings
        outer = frame.scope
        frame.scope = dict(outer)  # the loop's own scope, updated in place per step
        scope = frame.scope
        error: CELEvalError | None = None
        matches = 0
        try:
            for binding in bindings:
                frame.remaining -= LOOP_STEP_COST
                if frame.remaining < 0:
                    frame.spend(0)
                for var, value in zip(names, binding):
                    scope[var] = value
                result = predicate(frame)
                if not isinstance(result, celtypes.BoolType):
                    bad = result if isinstance(result, CELEvalError) else _error(f"{name}(): predicate returned {kind_name(result)}, not bool")
                    if name == "exists_one":
                        return bad
                    error = error or bad
                    continue
                if name == "all" and not result:
                    return celtypes.BoolType(False)
                if name == "exists" and result:
                    return celtypes.BoolType(True)
                matches += int(bool(result))
        finally:
            frame.scope = outer
        if error is not None:
            return error
        if name == "exists_one":
            return celtypes.BoolType(matches == 1)
        return celtypes.BoolType(name == "all")

    return quantifier


def _transform(name: str, names: tuple[str, ...], items: Callable[[Frame], Any], body: list[Fn]) -> Fn:
    """map(x, [filter,] expr), filter(x, pred), transformList(i, v, [filter,] expr): strict on errors."""
    keep_fn = body[0] if name == "filter" or len(body) == 2 else None
    expr_fn = None if name == "filter" else body[-1]

    def transform(frame: Frame) -> Any:
        bindings = items(frame)
        if isinstance(bindings, CELEvalError):
            return bindings
        outer = frame.scope
        frame.scope = dict(outer)
        scope = frame.scope
        out = celtypes.ListType()
        try:
            for binding in bindings:
                frame.spend(LOOP_STEP_COST)
                for var, value in zip(names, binding):
                    scope[var] = value
                if keep_fn is not None:
                    keep = keep_fn(frame)
                    if isinstance(keep, CELEvalError):
                        return keep
                    if not isinstance(keep, celtypes.BoolType):
                        return _error(f"{name}(): filter returned {kind_name(keep)}, not bool")
                    if not keep:
                        continue
                value = binding[0] if expr_fn is None else expr_fn(frame)
                if isinstance(value, CELEvalError):
                    return value
                out.append(value)
        finally:
            frame.scope = outer
        return out

    return transform


def _index(container: Any, key: Any) -> Any:
    if isinstance(container, list):
        position = _list_position(key)
        if position is None:
            return _error(f"found no matching overload for '_[_]' applied to '(list, {kind_name(key)})'")
        if not 0 <= position < len(container):
            return _error(f"index out of range: {position}", IndexError, (position,))
        return container[position]
    if isinstance(container, dict):
        if isinstance(key, str):
            try:
                return container[key]  # DomainMap answers an unknown domain with an empty map
            except KeyError:
                return _error(f"no such key: {_key_text(key)}", KeyError, (key,))
        value = map_get(container, key)
        if value is _MISSING:
            return _error(f"no such key: {_key_text(key)}", KeyError, (key,))
        return value
    return _error(f"found no matching overload for '_[_]' applied to '({kind_name(container)}, {kind_name(key)})'")


def _list_position(index: Any) -> int | None:
    """cel-go accepts int, uint and integral double list indexes on dyn values; never bool."""
    if isinstance(index, (bool, celtypes.BoolType)):
        return None
    if isinstance(index, int):
        return int(index)
    if isinstance(index, float) and index.is_integer():
        return int(index)
    return None


def _binding(bound: frozenset[str], names: Sequence[str]) -> frozenset[str]:
    inner = bound | set(names)
    return inner | {SHADOWED} if "device" in names else inner


def _variable(tree: lark.Tree) -> str:
    name = ident_name(tree)
    if name is None:
        raise ValueError("macro variable must be a simple identifier")  # analysis rejected it already
    return name
