"""compile_selector: Kubernetes DRA device selectors, compiled once and evaluated many times.

    selector = compile_selector('device.attributes["gpu.nvidia.com"].type == "gpu"')
    selector.evaluate(cel_device("gpu.nvidia.com", slice_device))  # -> bool or CelRuntimeError

Thread safety: compile_selector and evaluate may be called from any thread. Parsing is
serialized by a lock; each evaluation uses its own evaluator over a shared, read-only parse
tree and function table (cel-python's InterpretedRunner model; the CompiledRunner is not
used because it writes module globals during evaluation).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import celpy.celparser
import lark
from celpy import celtypes
from celpy.celparser import CELParseError, CELParser
from celpy.evaluation import CELEvalError

from dra_driver.common import suggest
from dra_driver.cel import analysis
from dra_driver.cel.analysis import ReferencedKey
from dra_driver.cel.device import CelDevice
from dra_driver.cel.environment import SCHEDULER, CelEnvironment
from dra_driver.cel.errors import CelCompileError, CelNotSupported, CelRuntimeError
from dra_driver.cel.cost import estimate
from dra_driver.cel.closures import Fn, Frame, compile_tree, kind_name
from dra_driver.cel.literals import literal_values
from dra_driver.model.resource_v1 import MAX_EXPRESSION_BYTES  # CELSelectorExpressionMaxLength

DEFAULT_COST_BUDGET = 1_000_000  # CELSelectorExpressionMaxCost, here counted in evaluation steps
MISSING = ("<missing>",)  # stands for an absent attribute in group keys

# cel-python logs every failed evaluation at ERROR; a failed selector is reported to the caller.
logging.getLogger("celpy").setLevel(logging.CRITICAL)

_parse_lock = threading.Lock()
_parser: CELParser | None = None


def _cached_lark() -> lark.Lark:
    """celpy's CEL grammar and parser options, built with lark's on-disk cache.

    Building the LALR tables takes ~0.25 s on every start; lark's cache (keyed by the
    grammar and options, kept in the temp dir) brings that to ~15 ms. Same grammar and
    options as CELParser.__init__, so the trees are identical.
    """
    grammar = (Path(celpy.celparser.__file__).parent / "cel.lark").read_text()
    return lark.Lark(
        grammar,
        parser="lalr",
        start="expr",
        debug=True,
        g_regex_flags=re.M,
        lexer_callbacks={"IDENT": CELParser.ambiguous_literals},
        propagate_positions=True,
        maybe_placeholders=False,
        priority="invert",
        tree_class=lark.Tree,
        cache=True,
    )


def _parse(expression: str) -> lark.Tree:
    global _parser
    with _parse_lock:
        if _parser is None:
            if CELParser.CEL_PARSER is None:
                try:
                    CELParser.CEL_PARSER = _cached_lark()
                except Exception:  # an unwritable temp dir or a lark change: build it the slow way
                    CELParser.CEL_PARSER = None
            # CELParser builds a process-wide lark parser once; creating it directly (not via
            # celpy.Environment) avoids Environment's sys.setrecursionlimit side effect.
            limit = sys.getrecursionlimit()
            _parser = CELParser(tree_class=lark.Tree)
            sys.setrecursionlimit(limit)
        return _parser.parse(expression)


@dataclass(frozen=True)
class CompiledSelector:
    """A checked, parsed selector. `referenced_keys` is None when not statically known."""

    expression: str
    tree: lark.Tree = field(repr=False, compare=False)
    referenced_keys: frozenset[ReferencedKey] | None = field(compare=False)
    budget: int = field(default=DEFAULT_COST_BUDGET, compare=False)
    literals: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)
    max_cost: int | None = field(default=None, compare=False)  # cel-go's worst-case estimate (cost.py)
    program: Fn | None = field(default=None, repr=False, compare=False)  # closures.py

    def evaluate(self, device: CelDevice) -> bool:
        """True/False, or CelRuntimeError (runtime error, non-bool result, budget exceeded)."""
        try:
            value = self.evaluate_value(device.value, device.paths)
        except CelRuntimeError as exc:
            hint = _missing_name_hint(exc.message, device)
            if hint:
                raise CelRuntimeError(self.expression, f"{exc.message}; {hint}") from exc
            raise
        if not isinstance(value, celtypes.BoolType):
            raise CelRuntimeError(self.expression, f"expression returned {kind_name(value)}, a selector must return bool")
        return bool(value)

    def evaluate_value(self, device_value: Any, paths: Mapping[Any, Any] | None = None) -> Any:
        """Evaluate with `device` bound to `device_value`; returns any CEL value.

        `paths` (CelDevice.paths) lets compiled device reads skip the CEL maps."""
        program = self.program or compile_tree(self.tree, self.literals)
        try:
            value = program(Frame({"device": device_value}, self.budget, self.expression, paths))
        except RecursionError as exc:
            raise CelRuntimeError(self.expression, "expression nested too deeply to evaluate") from exc
        if isinstance(value, CELEvalError):
            raise CelRuntimeError(self.expression, _error_text(value))
        return value

    def cost_problem(self) -> str | None:
        """The API server's refusal of a new selector whose estimated cost is over the limit, else None."""
        if self.max_cost is None or self.max_cost <= DEFAULT_COST_BUDGET:
            return None
        return f"too complex, exceeds cost limit (estimated cost {self.max_cost:,} exceeds budget {DEFAULT_COST_BUDGET:,})"

    def group_key(self, device: CelDevice) -> Hashable | None:
        """Devices with equal group keys get the same result (or the same error) from evaluate.

        None when the expression reads the device in a way analysis cannot follow.
        """
        keys = self.referenced_keys
        if keys is None:
            return None
        parts: list[Any] = []
        for key in sorted(keys, key=_sort_key):
            if key.kind == "driver":
                parts.append(device.driver)
                continue
            domain = device.driver if key.domain is None else key.domain
            if not key.name:
                parts.append(device.has_domain(key.kind, domain))
                continue
            value = device.attribute(domain, key.name) if key.kind == "attribute" else device.capacity(domain, key.name)
            parts.append(MISSING if value is None else (type(value).__name__, value))
        return tuple(parts)


def _sort_key(key: ReferencedKey) -> tuple[str, str, str]:
    return (key.kind, key.domain or "", key.name)


def _missing_name_hint(message: str, device: CelDevice) -> str:
    """For `no such key: productname`: the device's attribute or capacity names close to it (case counts in CEL)."""
    if not message.startswith("no such key: "):
        return ""
    names: set[str] = set()
    for kind in ("attributes", "capacity"):
        outer = device.value[kind]
        names.update(str(domain) for domain in dict.keys(outer))
        names.update(str(name) for domain in dict.keys(outer) for name in dict.keys(outer[domain]))
    return _close_names(message.removeprefix("no such key: "), frozenset(names))


@lru_cache(maxsize=1024)
def _close_names(missing: str, names: frozenset[str]) -> str:
    hint = suggest.did_you_mean(missing, sorted(names))
    return f"{hint} (attribute and capacity names are case-sensitive; guard optional ones with has() or 'in')" if hint else ""


def _error_text(error: CELEvalError) -> str:
    message = str(error.args[0]) if error.args else "evaluation error"
    if len(error.args) > 2 and error.args[2] and message in ("no such key",):
        message = f"{message}: {str.__str__(error.args[2][0]) if isinstance(error.args[2][0], str) else error.args[2][0]}"
    return message


def compile_selector(expression: str, budget: int = DEFAULT_COST_BUDGET, environment: CelEnvironment = SCHEDULER) -> CompiledSelector:
    """Parse and check one selector (cached by source text).

    Raises CelCompileError (syntax, > 10240 bytes, undeclared names) or its subclass
    CelNotSupported (valid Kubernetes CEL that this implementation cannot evaluate).
    """
    if not isinstance(expression, str):
        raise CelCompileError(str(expression), f"expression must be a string, got {type(expression).__name__}")
    return _compile(expression, budget, environment)


@lru_cache(maxsize=4096)
def _compile(expression: str, budget: int, environment: CelEnvironment) -> CompiledSelector:
    size = len(expression.encode())
    if size > MAX_EXPRESSION_BYTES:
        raise CelCompileError(expression, f"expression is {size} bytes, the limit is {MAX_EXPRESSION_BYTES}")
    if not expression.strip():
        raise CelCompileError(expression, "expression is empty")
    try:
        tree = _parse(expression)
    except CELParseError as exc:
        if ".?" in expression or "[?" in expression:
            raise CelNotSupported(expression, "optional field/index syntax (.? and [?]) is not supported") from exc
        raise CelCompileError(expression, _syntax_error(expression, exc)) from exc
    if analysis.raw_depth(tree) > 12 * analysis.MAX_DEPTH:
        raise CelCompileError(expression, f"expression nesting is deeper than {analysis.MAX_DEPTH} levels")
    tree = analysis.collapse(tree)
    try:
        analysis.check(tree, environment.device_fields)
    except analysis.AnalysisError as exc:
        error = CelCompileError if exc.supported else CelNotSupported
        raise error(expression, str(exc)) from exc
    literals = literal_values(tree)
    for value in literals.values():
        if isinstance(value, CELEvalError):
            raise CelCompileError(expression, f"invalid literal: {value.args[0] if value.args else value}")
    program = compile_tree(tree, literals)
    return CompiledSelector(expression, tree, analysis.referenced_keys(tree), budget, literals, estimate(tree), program)


def _syntax_error(expression: str, exc: Exception) -> str:
    """`Syntax error at column N`, then the whole line of the expression and a caret under the column (the
    parser's own text shows only the 40 characters before it)."""
    line, column = getattr(exc, "line", None), getattr(exc, "column", None)
    lines = expression.splitlines() or [expression]
    if not isinstance(line, int) or not isinstance(column, int) or not 1 <= line <= len(lines):
        return f"Syntax error: {_first_line(exc)}"
    where = f"line {line}, column {column}" if len(lines) > 1 else f"column {column}"
    text = lines[line - 1].replace("\t", " ")
    return f"Syntax error at {where}:\n    {text}\n    {' ' * max(column - 1, 0)}^"


def _first_line(exc: Exception) -> str:
    text = str(exc.args[0]) if exc.args else str(exc)
    return " ".join(text.split())[:300]
