"""A cel-python Evaluator with the Kubernetes pieces cel-python lacks.

On top of celpy's interpreter (operators, literals, member access, errors as values) it adds:
- a cost budget: every visited node and every comprehension iteration costs one unit;
  over the limit evaluation stops with CelBudgetExceeded (cel-python has no limit at all);
- our own call dispatch: GLOBALS / METHODS registries, namespaced functions
  (`sets.contains(a, b)`, `strings.quote(s)`), clear error messages;
- the macros with CEL semantics: has, all, exists, exists_one/existsOne, map (2 and 3
  argument forms), filter, the two-variable forms all/exists/existsOne(i, v, p) and
  transformList, and `cel.bind(name, value, expr)`;
- lexical scoping through an immutable name -> value dict (macro and bind variables shadow
  outer names; a bound error value stays an error value until it is used);
- short-circuit `&&`/`||` on the left operand (same result, less work).

One Evaluator is created per evaluation, so evaluations on different threads share nothing
mutable (the functions Activation is only read).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, cast

import lark
from celpy import celtypes
from celpy.evaluation import Activation, CELEvalError, Evaluator

from dra_driver.cel.errors import CelBudgetExceeded
from dra_driver.cel.library import _MISSING, GLOBALS, METHODS, map_get

Scope = dict[str, Any]
_UNSET = object()

_BOOL_MACROS = {"all", "exists", "exists_one", "existsOne"}

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


class BudgetEvaluator(Evaluator):  # type: ignore[misc]
    """Evaluates one parse tree against one scope, spending at most `budget` cost units."""

    def __init__(
        self,
        ast: lark.Tree,
        activation: Activation,
        scope: Scope,
        budget: int,
        expression: str,
        literals: dict[int, Any] | None = None,
    ) -> None:
        super().__init__(ast, activation)
        self.functions = activation.functions
        self.literals = literals if literals is not None else {}
        self.scope = scope
        self.remaining = budget
        self.budget = budget
        self.expression = expression

    # ------------------------------------------------------------ budget

    def spend(self, units: int = 1) -> None:
        self.remaining -= units
        if self.remaining < 0:
            raise CelBudgetExceeded(self.expression, budget_message(self.budget))

    def _visit_tree(self, tree: lark.Tree) -> Any:
        self.remaining -= 1
        if self.remaining < 0:
            raise CelBudgetExceeded(self.expression, budget_message(self.budget))
        return super()._visit_tree(tree)

    def run(self) -> Any:
        return self.visit(self.ast)

    # ------------------------------------------------------------ names

    def ident_value(self, name: str, root_scope: bool = False) -> Any:
        if name in self.scope:
            return self.scope[name]
        raise KeyError(name)

    def _with_scope(self, bindings: Scope, tree: lark.Tree) -> Any:
        outer = self.scope
        self.scope = {**outer, **bindings}
        try:
            return self.visit(tree)
        finally:
            self.scope = outer

    # ------------------------------------------------------------ logic

    def conditionaland(self, tree: lark.Tree) -> Any:
        if len(tree.children) == 2:
            left = self.visit(cast(lark.Tree, tree.children[0]))
            if isinstance(left, celtypes.BoolType) and not left:
                return left
            right = self.visit(cast(lark.Tree, tree.children[1]))
            return _logic(left, right, False, "&&", tree)
        return super().conditionaland(tree)

    def conditionalor(self, tree: lark.Tree) -> Any:
        if len(tree.children) == 2:
            left = self.visit(cast(lark.Tree, tree.children[0]))
            if isinstance(left, celtypes.BoolType) and left:
                return left
            right = self.visit(cast(lark.Tree, tree.children[1]))
            return _logic(left, right, True, "||", tree)
        return super().conditionalor(tree)

    def expr(self, tree: lark.Tree) -> Any:
        if len(tree.children) == 3:
            condition = self.visit(cast(lark.Tree, tree.children[0]))
            if isinstance(condition, CELEvalError):
                return condition
            if not isinstance(condition, celtypes.BoolType):
                return CELEvalError(f"no matching overload for ?: on {_kind(condition)} condition", TypeError, (), tree=tree)
            return self.visit(cast(lark.Tree, tree.children[1 if condition else 2]))
        return super().expr(tree)

    # ------------------------------------------------------------ operators and member access
    # Lean versions of celpy's methods (same operator functions, same results): celpy's
    # build typing objects on every call, which made evaluation ~5x slower.

    def relation(self, tree: lark.Tree) -> Any:
        return self._binary(tree)

    def addition(self, tree: lark.Tree) -> Any:
        return self._binary(tree)

    def multiplication(self, tree: lark.Tree) -> Any:
        return self._binary(tree)

    def _binary(self, tree: lark.Tree) -> Any:
        if len(tree.children) == 1:
            return self.visit(cast(lark.Tree, tree.children[0]))
        op_tree, right_tree = cast(list[lark.Tree], tree.children)
        left = self.visit(cast(lark.Tree, op_tree.children[0]))
        right = self.visit(right_tree)
        name, symbol = _BINARY[op_tree.data]
        if isinstance(left, CELEvalError):
            return left
        if isinstance(right, CELEvalError):
            return right
        try:
            return self.functions[name](left, right)
        except TypeError as exc:
            return CELEvalError(f"no matching overload for {_kind(left)} {symbol} {_kind(right)}", TypeError, exc.args, tree=tree)
        except ZeroDivisionError as exc:
            return CELEvalError("division by zero", type(exc), exc.args, tree=tree)
        except (ValueError, OverflowError, ArithmeticError) as exc:
            return CELEvalError(f"{symbol}: {exc or 'overflow'}", type(exc), exc.args, tree=tree)

    def unary(self, tree: lark.Tree) -> Any:
        if len(tree.children) == 1:
            return self.visit(cast(lark.Tree, tree.children[0]))
        op_tree, operand_tree = cast(list[lark.Tree], tree.children)
        operand = self.visit(operand_tree)
        if isinstance(operand, CELEvalError):
            return operand
        name = "!_" if op_tree.data == "unary_not" else "-_"
        try:
            return self.functions[name](operand)
        except TypeError as exc:
            return CELEvalError(f"no matching overload for {name[0]}{_kind(operand)}", TypeError, exc.args, tree=tree)
        except (ValueError, OverflowError) as exc:
            return CELEvalError(f"{name[0]}: {exc or 'overflow'}", type(exc), exc.args, tree=tree)

    def member_dot(self, tree: lark.Tree) -> Any:
        target = self.visit(cast(lark.Tree, tree.children[0]))
        field = cast(lark.Token, tree.children[1]).value
        if isinstance(target, CELEvalError):
            return target
        if isinstance(target, dict):
            try:
                return target[field]
            except KeyError:
                return CELEvalError(f"no such key: {field}", KeyError, (field,), tree=tree)
        return CELEvalError(f"{_kind(target)} does not support field selection (.{field})", TypeError, (), tree=tree)

    def member_index(self, tree: lark.Tree) -> Any:
        target = self.visit(cast(lark.Tree, tree.children[0]))
        index = self.visit(cast(lark.Tree, tree.children[1]))
        if isinstance(target, CELEvalError):
            return target
        if isinstance(index, CELEvalError):
            return index
        if isinstance(target, list):
            position = _list_position(index)
            if position is None:
                return CELEvalError(f"no matching overload for list[{_kind(index)}]", TypeError, (), tree=tree)
            if not 0 <= position < len(target):
                return CELEvalError(f"index out of range: {position}", IndexError, (position,), tree=tree)
            return target[position]
        if isinstance(target, dict):
            if isinstance(index, str):
                try:
                    return target[index]  # DomainMap answers an unknown domain with an empty map
                except KeyError:
                    return CELEvalError(f"no such key: {_display(index)}", KeyError, (index,), tree=tree)
            value = map_get(target, index)
            if value is _MISSING:
                return CELEvalError(f"no such key: {_display(index)}", KeyError, (index,), tree=tree)
            return value
        return CELEvalError(f"no matching overload for {_kind(target)}[{_kind(index)}]", TypeError, (), tree=tree)

    def literal(self, tree: lark.Tree) -> Any:
        cached = self.literals.get(id(tree), _UNSET)
        if cached is _UNSET:
            return super().literal(tree)
        return cached

    # ------------------------------------------------------------ primaries and calls

    def primary(self, tree: lark.Tree) -> Any:
        child = cast(lark.Tree, tree.children[0])
        if child.data == "literal":
            return self.literal(child)
        if child.data == "paren_expr":
            return self.visit(cast(lark.Tree, child.children[0]))
        if child.data == "ident":
            name = str(cast(lark.Token, child.children[0]).value)
            if name in self.scope:
                return self.scope[name]
            return CELEvalError(f"undeclared reference to {name!r}", KeyError, (name,), tree=tree)
        if child.data == "ident_arg":
            name = str(cast(lark.Token, child.children[0]).value)
            args = cast(list[lark.Tree], child.children[1].children) if len(child.children) > 1 else []
            if name == "has":
                return self._has(args, tree)
            if name == "dyn":
                return self.visit(args[0])
            return self._call(name, GLOBALS, None, args, tree)
        return super().primary(tree)

    def _call(
        self, name: str, registry: dict[str, Callable[..., Any]], receiver: Any, arg_trees: Iterable[lark.Tree], tree: lark.Tree
    ) -> Any:
        function = registry.get(name)
        if function is None:
            return CELEvalError(f"undeclared reference to function {name!r}", KeyError, (name,), tree=tree)
        args = [self.visit(a) for a in arg_trees]
        if receiver is not None:
            args.insert(0, receiver)
        for value in args:
            if isinstance(value, CELEvalError):
                return value
        try:
            return function(*args)
        except TypeError as exc:
            return CELEvalError(f"no such overload: {name}({', '.join(_kind(a) for a in args)}): {exc}", TypeError, exc.args, tree=tree)
        except (ValueError, ArithmeticError, IndexError, KeyError, OverflowError) as exc:
            return CELEvalError(f"{name}: {exc}", type(exc), exc.args, tree=tree)

    def _has(self, args: list[lark.Tree], tree: lark.Tree) -> Any:
        """has(e.f): e must evaluate (an error stays an error); true when map e has key f."""
        target = args[0] if args else None
        if target is None or target.data != "member_dot":
            return CELEvalError("has() needs a field selection such as has(m.f)", ValueError, (), tree=tree)
        container = self.visit(cast(lark.Tree, target.children[0]))
        field = cast(lark.Token, target.children[1]).value
        if isinstance(container, CELEvalError):
            return container
        if isinstance(container, dict):
            return celtypes.BoolType(dict.__contains__(container, field))
        return CELEvalError(f"has(): {_kind(container)} does not support field selection", TypeError, (), tree=tree)

    def member_dot_arg(self, tree: lark.Tree) -> Any:
        member_tree = cast(lark.Tree, tree.children[0])
        name = str(cast(lark.Token, tree.children[1]).value)
        args = cast(list[lark.Tree], tree.children[2].children) if len(tree.children) > 2 else []
        namespace = namespace_of(member_tree)
        if namespace is not None and namespace not in self.scope:
            qualified = f"{namespace}.{name}"
            if qualified == "cel.bind":
                return self._bind(args, tree)
            return self._call(qualified, GLOBALS, None, args, tree)
        if name in _BOOL_MACROS or name in ("map", "filter", "transformList"):
            return self._macro(name, member_tree, args, tree)
        receiver = self.visit(member_tree)
        if isinstance(receiver, CELEvalError):
            return receiver
        return self._call(name, METHODS, receiver, args, tree)

    # ------------------------------------------------------------ macros

    def _bind(self, args: list[lark.Tree], tree: lark.Tree) -> Any:
        name = variable_name(args[0])
        value = self.visit(args[1])
        return self._with_scope({name: value}, args[2])

    def _macro(self, name: str, member_tree: lark.Tree, args: list[lark.Tree], tree: lark.Tree) -> Any:
        target = self.visit(member_tree)
        if isinstance(target, CELEvalError):
            return target
        if not isinstance(target, (list, dict)):
            return CELEvalError(f"{name}(): cannot iterate over {_kind(target)}", TypeError, (), tree=tree)
        two_vars = name == "transformList" or (name in _BOOL_MACROS and len(args) == 3)
        if two_vars:
            pairs = list(target.items()) if isinstance(target, dict) else list(enumerate(target))
            first, second = variable_name(args[0]), variable_name(args[1])
            items = [({first: _index(k), second: v}) for k, v in pairs]
            body = args[2:]
        else:
            var = variable_name(args[0])
            items = [{var: v} for v in (list(target.keys()) if isinstance(target, dict) else target)]
            body = args[1:]
        if name in _BOOL_MACROS:
            return self._quantifier("exists_one" if name == "existsOne" else name, items, body[0], tree)
        return self._transform(name, items, body, tree)

    def _quantifier(self, name: str, items: list[Scope], predicate: lark.Tree, tree: lark.Tree) -> Any:
        """all/exists stop at the deciding value; an error only counts when nothing decided."""
        error: CELEvalError | None = None
        matches = 0
        for bindings in items:
            self.spend()
            result = self._with_scope(bindings, predicate)
            if isinstance(result, CELEvalError):
                if name == "exists_one":
                    return result
                error = error or result
                continue
            if not isinstance(result, celtypes.BoolType):
                bad = CELEvalError(f"{name}(): predicate returned {_kind(result)}, not bool", TypeError, (), tree=tree)
                if name == "exists_one":
                    return bad
                error = error or bad
                continue
            if name == "all" and not result:
                return celtypes.BoolType(False)
            if name == "exists" and result:
                return celtypes.BoolType(True)
            matches += int(bool(result))
        if error is not None:
            return error
        if name == "exists_one":
            return celtypes.BoolType(matches == 1)
        return celtypes.BoolType(name == "all")

    def _transform(self, name: str, items: list[Scope], body: list[lark.Tree], tree: lark.Tree) -> Any:
        """map(x, [filter,] expr), filter(x, pred), transformList(i, v, [filter,] expr): strict on errors."""
        keep_tree = body[0] if name == "filter" or len(body) == 2 else None
        expr_tree = None if name == "filter" else body[-1]
        out = celtypes.ListType()
        for bindings in items:
            self.spend()
            if keep_tree is not None:
                keep = self._with_scope(bindings, keep_tree)
                if isinstance(keep, CELEvalError):
                    return keep
                if not isinstance(keep, celtypes.BoolType):
                    return CELEvalError(f"{name}(): filter returned {_kind(keep)}, not bool", TypeError, (), tree=tree)
                if not keep:
                    continue
            value = next(iter(bindings.values())) if expr_tree is None else self._with_scope(bindings, expr_tree)
            if isinstance(value, CELEvalError):
                return value
            out.append(value)
        return out


# ---------------------------------------------------------------- tree helpers (shared with analysis)


def ident_name(tree: Any) -> str | None:
    """The name when `tree` is a bare identifier (after chain collapsing: primary(ident(IDENT)))."""
    node = tree
    while isinstance(node, lark.Tree) and len(node.children) == 1 and node.data != "ident":
        node = node.children[0]
    if isinstance(node, lark.Tree) and node.data == "ident":
        return cast(lark.Token, node.children[0]).value
    return None


def namespace_of(member_tree: lark.Tree) -> str | None:
    from dra_driver.cel.library import NAMESPACES

    name = ident_name(member_tree)
    return name if name in NAMESPACES else None


def variable_name(tree: lark.Tree) -> str:
    name = ident_name(tree)
    if name is None:
        raise ValueError("macro variable must be a simple identifier")
    return name


def _logic(left: Any, right: Any, decisive: bool, symbol: str, tree: lark.Tree) -> Any:
    """cel-go's && (decisive false) and || (decisive true): either operand's decisive value
    wins, even over an error; two bools give the other value; otherwise the left error, the
    right error, or "no such overload" for a non-bool operand (`true && 1`)."""
    left_bool = isinstance(left, celtypes.BoolType)
    right_bool = isinstance(right, celtypes.BoolType)
    if (left_bool and bool(left) is decisive) or (right_bool and bool(right) is decisive):
        return celtypes.BoolType(decisive)
    if left_bool and right_bool:
        return celtypes.BoolType(not decisive)
    if isinstance(left, CELEvalError):
        return left
    if isinstance(right, CELEvalError):
        return right
    return CELEvalError(f"no matching overload for {_kind(left)} {symbol} {_kind(right)}", TypeError, (), tree=tree)


def _list_position(index: Any) -> int | None:
    """cel-go accepts int, uint and integral double list indexes on dyn values; never bool."""
    if isinstance(index, celtypes.BoolType) or isinstance(index, bool):
        return None
    if isinstance(index, int):
        return int(index)
    if isinstance(index, float) and index.is_integer():
        return int(index)
    return None


def _index(key: Any) -> Any:
    return celtypes.IntType(key) if isinstance(key, int) and not isinstance(key, bool) else key


def budget_message(budget: int) -> str:
    """cel-go's wording (the Go tests match it), with the limit that was hit."""
    return f"operation cancelled: actual cost limit exceeded (limit {budget:,})"


def _display(value: Any) -> str:
    """A CEL value as a user wrote it: strings bare (like Go's "no such key: x"), never a Python type name."""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    return str(value)


def _kind(value: Any) -> str:
    if isinstance(value, CELEvalError):
        return "error"
    return type(value).__name__.replace("Type", "").lower()
