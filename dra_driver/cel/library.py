"""The function library of the Kubernetes 1.35 DRA CEL environment, on cel-python values.

Two registries: GLOBALS (called as `f(x)`) and METHODS (called as `x.f()`, receiver
first). cel-python dispatches by name only, so each function dispatches on the receiver's
type itself (one `compareTo` for Quantity and Semver, one `indexOf` for strings and lists).
Functions raise TypeError for a wrong argument type ("no such overload") and ValueError
for a bad value; the evaluator turns both into CEL errors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any, TypeVar, cast

import re2
from celpy import celtypes
from celpy.evaluation import base_functions

from dra_driver.cel.types import INT64_MAX, INT64_MIN, Quantity, Semver, cel_type_name

CelFunction = Callable[..., Any]
ReceiverT = TypeVar("ReceiverT")


# ---------------------------------------------------------------- helpers


def _require(value: Any, kinds: type | tuple[type, ...], what: str) -> None:
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in _as_tuple(kinds)):
        raise TypeError(f"{what}: unexpected argument type {cel_type_name(value)}")


_TRUE, _FALSE = celtypes.BoolType(True), celtypes.BoolType(False)


def cel_bool(value: Any) -> celtypes.BoolType:
    """A CEL bool; the two values are shared because building a BoolType is slow."""
    return _TRUE if value else _FALSE


def _as_tuple(kinds: type | tuple[type, ...]) -> tuple[type, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, (bool, celtypes.BoolType))


def _is_number(value: Any) -> bool:
    return _is_int(value) or isinstance(value, float)


def _int64(value: int) -> celtypes.IntType:
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError("integer overflow")
    return celtypes.IntType(value)


def _plain(value: Any) -> int | float:
    return int(value) if _is_int(value) else float(value)


def _receiver(value: Any, kind: type[ReceiverT], what: str) -> ReceiverT:
    if not isinstance(value, kind):
        raise TypeError(f"{what}: receiver must be a {kind.__name__}, got {cel_type_name(value)}")
    return value


def _parses(parse: Callable[[str], Any], text: str) -> celtypes.BoolType:
    """isQuantity/isSemver: whether `parse` accepts the text (ValueError means no)."""
    try:
        parse(text)
    except ValueError:
        return cel_bool(False)
    return cel_bool(True)


_MISSING = object()
_SAME_TYPE_FAST = frozenset({celtypes.StringType, celtypes.IntType, celtypes.UintType, celtypes.BoolType, celtypes.BytesType})


def _equality_kind(value: Any) -> Any:
    """Values of different kinds are never equal (numbers are handled before this)."""
    if isinstance(value, (bool, celtypes.BoolType)):
        return bool
    if isinstance(value, str):
        return str
    if isinstance(value, bytes):
        return bytes
    return type(value)


def cel_equal(left: Any, right: Any) -> bool:
    """CEL heterogeneous equality, as cel-go evaluates `==` on dyn values.

    int, uint and double compare by numeric value; a bool never equals a number; lists
    and maps compare element by element with this same rule; other kinds must match.
    """
    if type(left) is type(right) and type(left) in _SAME_TYPE_FAST:
        return bool(left == right)
    if _is_number(left) and _is_number(right):
        return _plain(left) == _plain(right)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(cel_equal(a, b) for a, b in zip(left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        if len(left) != len(right):
            return False
        return all((found := map_get(right, key)) is not _MISSING and cel_equal(value, found) for key, value in left.items())
    if _equality_kind(left) is not _equality_kind(right):
        return False
    try:
        return bool(left == right)
    except TypeError:
        return False


def map_get(mapping: dict[Any, Any], key: Any) -> Any:
    """The value under `key` with CEL key equality (`{1: "a"}[1.0]`, never `{true: x}[1]`), else _MISSING."""
    if isinstance(key, str):  # str keys never collide with other kinds in a Python dict
        return dict.get(mapping, key, _MISSING)
    for candidate, value in mapping.items():
        if cel_equal(candidate, key):
            return value
    return _MISSING


def map_has(mapping: dict[Any, Any], key: Any) -> bool:
    return map_get(mapping, key) is not _MISSING


def _equals(left: Any, right: Any) -> celtypes.BoolType:
    return cel_bool(cel_equal(left, right))


def _not_equals(left: Any, right: Any) -> celtypes.BoolType:
    return cel_bool(not cel_equal(left, right))


def _contains(item: Any, container: Any) -> celtypes.BoolType:
    """`item in list` (CEL equality on elements) and `key in map` (CEL key equality)."""
    if isinstance(container, list):
        return cel_bool(any(cel_equal(item, element) for element in container))
    if isinstance(container, dict):
        return cel_bool(map_has(container, item))
    raise TypeError(f"no such overload: in on {cel_type_name(container)}")


# ---------------------------------------------------------------- quantity library (1.28)


def quantity(text: Any) -> Quantity:
    _require(text, str, "quantity")
    return _parse_quantity(str(text))


@lru_cache(maxsize=1024)
def _parse_quantity(text: str) -> Quantity:
    """Selectors repeat the same literal for every device; parsing is the slow part."""
    return Quantity.parse(text)


def is_quantity(text: Any) -> celtypes.BoolType:
    _require(text, str, "isQuantity")
    return _parses(Quantity.parse, text)


def _quantity(value: Any, what: str) -> Quantity:
    return _receiver(value, Quantity, what)


def sign(value: Any) -> celtypes.IntType:
    q = _quantity(value, "sign")
    return celtypes.IntType((q.value > 0) - (q.value < 0))


def is_integer(value: Any) -> celtypes.BoolType:
    q = _quantity(value, "isInteger")
    exact = q.value == q.value.to_integral_value()
    return cel_bool(bool(exact and INT64_MIN <= q.value <= INT64_MAX))


def as_integer(value: Any) -> celtypes.IntType:
    q = _quantity(value, "asInteger")
    if not is_integer(q):
        raise ValueError("cannot convert value to integer")  # Go's wording; the tests match it
    return celtypes.IntType(int(q.value))


def as_approximate_float(value: Any) -> celtypes.DoubleType:
    return celtypes.DoubleType(float(_quantity(value, "asApproximateFloat").value))


def _quantity_operand(value: Any, what: str) -> Decimal:
    if isinstance(value, Quantity):
        return value.value
    if _is_int(value):
        return Decimal(int(value))
    raise TypeError(f"{what}: argument must be a Quantity or an int, got {cel_type_name(value)}")


def _quantity_from(value: Decimal) -> Quantity:
    return Quantity(value, format(value, "f"))


def add(receiver: Any, other: Any) -> Quantity:
    return _quantity_from(_quantity(receiver, "add").value + _quantity_operand(other, "add"))


def sub(receiver: Any, other: Any) -> Quantity:
    return _quantity_from(_quantity(receiver, "sub").value - _quantity_operand(other, "sub"))


# ---------------------------------------------------------------- semver library (1.33)


def semver(text: Any, normalize: Any = False) -> Semver:
    _require(text, str, "semver")
    _require(normalize, (bool, celtypes.BoolType), "semver")
    return Semver.parse(text, bool(normalize))


def is_semver(text: Any, normalize: Any = False) -> celtypes.BoolType:
    _require(text, str, "isSemver")
    _require(normalize, (bool, celtypes.BoolType), "isSemver")
    return _parses(lambda value: Semver.parse(value, bool(normalize)), text)


def _semver(value: Any, what: str) -> Semver:
    return _receiver(value, Semver, what)


def major(value: Any) -> celtypes.IntType:
    return celtypes.IntType(_semver(value, "major").major)


def minor(value: Any) -> celtypes.IntType:
    return celtypes.IntType(_semver(value, "minor").minor)


def patch(value: Any) -> celtypes.IntType:
    return celtypes.IntType(_semver(value, "patch").patch)


# ---------------------------------------------------------------- shared by quantity and semver


def _compare(receiver: Any, other: Any, what: str) -> int:
    if isinstance(receiver, Quantity) and isinstance(other, Quantity):
        return receiver.compare(other)
    if isinstance(receiver, Semver) and isinstance(other, Semver):
        return receiver.compare(other)
    raise TypeError(f"{what}: needs two Quantities or two Semvers, got {cel_type_name(receiver)}, {cel_type_name(other)}")


_SIGNS = {-1: celtypes.IntType(-1), 0: celtypes.IntType(0), 1: celtypes.IntType(1)}  # IntType() is slow to build


def compare_to(receiver: Any, other: Any) -> celtypes.IntType:
    return _SIGNS[_compare(receiver, other, "compareTo")]


def is_greater_than(receiver: Any, other: Any) -> celtypes.BoolType:
    return cel_bool(_compare(receiver, other, "isGreaterThan") > 0)


def is_less_than(receiver: Any, other: Any) -> celtypes.BoolType:
    return cel_bool(_compare(receiver, other, "isLessThan") < 0)


# ---------------------------------------------------------------- ext.Strings (v2)


def _string(value: Any, what: str) -> str:
    _require(value, str, what)
    return str(value)


def _int_arg(value: Any, what: str) -> int:
    if not _is_int(value):
        raise TypeError(f"{what}: expected an int argument, got {cel_type_name(value)}")
    return int(value)


def char_at(receiver: Any, index: Any) -> celtypes.StringType:
    text, i = _string(receiver, "charAt"), _int_arg(index, "charAt")
    if i < 0 or i > len(text):
        raise ValueError(f"charAt: index out of range: {i}")
    return celtypes.StringType(text[i : i + 1])


def _string_index_of(text: str, sub: Any, start: Any, last: bool) -> celtypes.IntType:
    needle = _string(sub, "indexOf")
    if start is None:
        offset = len(text) if last else 0
    else:
        offset = _int_arg(start, "indexOf")
        if offset < 0 or offset > len(text):
            raise ValueError(f"index out of range: {offset}")
    if last:
        return celtypes.IntType(text.rfind(needle, 0, offset + len(needle)))
    return celtypes.IntType(text.find(needle, offset))


def _list_index_of(items: Sequence[Any], value: Any, last: bool) -> celtypes.IntType:
    positions = range(len(items) - 1, -1, -1) if last else range(len(items))
    for i in positions:
        if cel_equal(items[i], value):
            return celtypes.IntType(i)
    return celtypes.IntType(-1)


def _index_of(receiver: Any, value: Any, start: Any, last: bool, what: str) -> celtypes.IntType:
    if isinstance(receiver, str):
        return _string_index_of(str(receiver), value, start, last)
    if isinstance(receiver, list) and start is None:
        return _list_index_of(receiver, value, last)
    raise TypeError(f"{what}: unsupported receiver {cel_type_name(receiver)}")


def index_of(receiver: Any, value: Any, start: Any = None) -> celtypes.IntType:
    """String ext `s.indexOf(sub[, start])` or K8s lists `l.indexOf(x)`."""
    return _index_of(receiver, value, start, False, "indexOf")


def last_index_of(receiver: Any, value: Any, start: Any = None) -> celtypes.IntType:
    return _index_of(receiver, value, start, True, "lastIndexOf")


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def lower_ascii(receiver: Any) -> celtypes.StringType:
    return celtypes.StringType(_string(receiver, "lowerAscii").translate(_ASCII_LOWER))


def upper_ascii(receiver: Any) -> celtypes.StringType:
    return celtypes.StringType(_string(receiver, "upperAscii").translate(_ASCII_UPPER))


def replace(receiver: Any, old: Any, new: Any, limit: Any = None) -> celtypes.StringType:
    text = _string(receiver, "replace")
    count = -1 if limit is None else _int_arg(limit, "replace")
    return celtypes.StringType(text.replace(_string(old, "replace"), _string(new, "replace"), count))


def split(receiver: Any, separator: Any, limit: Any = None) -> celtypes.ListType:
    """Go strings.SplitN semantics: limit 0 -> [], negative -> all, n -> at most n parts."""
    text, sep = _string(receiver, "split"), _string(separator, "split")
    count = -1 if limit is None else _int_arg(limit, "split")
    if count == 0:
        return celtypes.ListType()
    if sep == "":
        parts = list(text)
        if 0 < count < len(parts):
            parts = parts[: count - 1] + ["".join(parts[count - 1 :])]
    else:
        parts = text.split(sep, count - 1 if count > 0 else -1)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def substring(receiver: Any, start: Any, end: Any = None) -> celtypes.StringType:
    text = _string(receiver, "substring")
    first = _int_arg(start, "substring")
    last = len(text) if end is None else _int_arg(end, "substring")
    if first < 0 or first > len(text) or last < 0 or last > len(text):
        raise ValueError(f"substring: index out of range: {first}, {last}")
    if first > last:
        raise ValueError(f"substring: invalid range: start {first} > end {last}")
    return celtypes.StringType(text[first:last])


# Go's unicode.IsSpace set (strings.TrimSpace, which cel-go's trim uses): Unicode White_Space.
# Python's str.strip() also strips U+001C..U+001F, which Go keeps.
_GO_SPACE = "\t\n\v\f\r \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


def trim(receiver: Any) -> celtypes.StringType:
    return celtypes.StringType(_string(receiver, "trim").strip(_GO_SPACE))


def join(receiver: Any, separator: Any = "") -> celtypes.StringType:
    _require(receiver, list, "join")
    sep = _string(separator, "join")
    for item in receiver:
        if not isinstance(item, str):
            raise TypeError(f"join: list elements must be strings, got {cel_type_name(item)}")
    return celtypes.StringType(sep.join(receiver))


_QUOTE_ESCAPES = str.maketrans(
    {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v", "\\": "\\\\", '"': '\\"'}
)


def quote(text: Any) -> celtypes.StringType:
    """strings.quote as cel-go: escape only \\a \\b \\f \\n \\r \\t \\v, backslash and the double quote;
    every other character (other controls, non-ASCII) is copied as is."""
    return celtypes.StringType('"' + _string(text, "strings.quote").translate(_QUOTE_ESCAPES) + '"')


def format_string(receiver: Any, args: Any) -> celtypes.StringType:
    """`"%s has %d".format([a, b])`: verbs %s %d %f %e %x %X %o %b %% with optional precision."""
    template = _string(receiver, "format")
    _require(args, list, "format")
    out: list[str] = []
    i = arg = 0
    while i < len(template):
        ch = template[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        j = i + 1
        precision: int | None = None
        if j < len(template) and template[j] == ".":
            k = j + 1
            while k < len(template) and template[k].isdigit():
                k += 1
            precision = int(template[j + 1 : k] or "0")
            j = k
        if j >= len(template):
            raise ValueError("format: unterminated formatting clause")
        verb = template[j]
        if verb == "%":
            out.append("%")
        else:
            if arg >= len(args):
                raise ValueError(f"format: index {arg} out of range")
            out.append(_format_one(verb, args[arg], precision))
            arg += 1
        i = j + 1
    if arg != len(args):
        raise ValueError(f"format: {len(args)} arguments given, {arg} used")
    return celtypes.StringType("".join(out))


def _format_one(verb: str, value: Any, precision: int | None) -> str:
    if verb == "s":
        return _to_display(value)
    if verb == "d":
        if not _is_int(value):
            raise TypeError(f"format: %d needs an integer, got {cel_type_name(value)}")
        return str(int(value))
    if verb in "fe":
        if not _is_number(value):
            raise TypeError(f"format: %{verb} needs a number, got {cel_type_name(value)}")
        return f"{float(value):.{6 if precision is None else precision}{verb}}"
    if verb in "xXob":
        if isinstance(value, bool):
            value = int(value)
        if _is_int(value):
            text = format(int(value), {"x": "x", "X": "X", "o": "o", "b": "b"}[verb])
            return text
        if verb in "xX" and isinstance(value, (str, bytes)):
            raw = value.encode() if isinstance(value, str) else bytes(value)
            return raw.hex().upper() if verb == "X" else raw.hex()
        raise TypeError(f"format: %{verb} cannot format {cel_type_name(value)}")
    raise ValueError(f"format: unrecognized formatting clause %{verb}")


def _to_display(value: Any) -> str:
    if isinstance(value, (float, bytes)):
        # cel-go's rendering of doubles and bytes under %s is not reproduced here: refuse
        # rather than print something different (docs/cel.md).
        raise ValueError(f"format: %s of a {'double' if isinstance(value, float) else 'bytes'} value is not supported here")
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_to_display(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_to_display(k)}: {_to_display(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (Quantity, Semver)):
        raise TypeError(f"format: %s cannot format {cel_type_name(value)}")
    return str(value)


# ---------------------------------------------------------------- K8s regex library


def find(receiver: Any, pattern: Any) -> celtypes.StringType:
    return _find(_string(receiver, "find"), _string(pattern, "find"))


@lru_cache(maxsize=4096)
def _find(text: str, pattern: str) -> celtypes.StringType:
    """Pure, and selectors repeat it per device and per loop step: cached."""
    match = _compile_regex(pattern).search(text)
    return celtypes.StringType(match.group(0) if match else "")


def find_all(receiver: Any, pattern: Any, limit: Any = None) -> celtypes.ListType:
    text, regex = _string(receiver, "findAll"), _compile_regex(pattern)
    count = -1 if limit is None else _int_arg(limit, "findAll")
    if count == 0:
        return celtypes.ListType()
    found = [m.group(0) for m in regex.finditer(text)]
    if count > 0:
        found = found[:count]
    return celtypes.ListType([celtypes.StringType(f) for f in found])


def matches(receiver: Any, pattern: Any) -> celtypes.BoolType:
    """`s.matches(re)` / `matches(s, re)`: RE2 search anywhere in the string, as cel-go."""
    text, regex = _string(receiver, "matches"), _compile_regex(pattern)
    return cel_bool(regex.search(text) is not None)


def _compile_regex(pattern: Any) -> Any:
    source = _string(pattern, "regex")
    problem = regex_error(source)
    if problem is not None:
        raise ValueError(f"invalid regular expression {source!r}: {problem}")
    return _quiet_compile(source)


# Without log_errors=False, RE2 writes an absl "E0000 ... re2.cc" line to stderr per bad pattern.
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@lru_cache(maxsize=256)
def _quiet_compile(source: str) -> Any:
    return re2.compile(source, options=_RE2_OPTIONS)


@lru_cache(maxsize=256)
def regex_error(source: str) -> str | None:
    """Why RE2 rejects `source`, or None when it compiles."""
    try:
        _quiet_compile(source)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else ""
        return (reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)) or "invalid pattern"
    return None


# ---------------------------------------------------------------- K8s lists library


def _list(value: Any, what: str) -> list[Any]:
    _require(value, list, what)
    return list(value)


def _ordered(items: list[Any], what: str) -> None:
    """Elements must be mutually comparable: all numbers or all of one other type."""
    if all(_is_number(i) for i in items):
        return
    kinds = {type(i) for i in items}
    if len(kinds) > 1 or (items and isinstance(items[0], (list, dict, bool, Quantity, Semver)) and not isinstance(items[0], bool)):
        raise TypeError(f"{what}: list elements are not comparable")


def is_sorted(receiver: Any) -> celtypes.BoolType:
    items = _list(receiver, "isSorted")
    _ordered(items, "isSorted")
    return cel_bool(all(items[i] <= items[i + 1] for i in range(len(items) - 1)))


def sum_list(receiver: Any) -> Any:
    items = _list(receiver, "sum")
    if not items:
        return celtypes.IntType(0)
    if all(isinstance(i, celtypes.DoubleType) for i in items):
        return celtypes.DoubleType(math.fsum(items))
    if all(isinstance(i, celtypes.UintType) for i in items):
        return celtypes.UintType(sum(int(i) for i in items))
    if all(_is_int(i) and not isinstance(i, celtypes.UintType) for i in items):
        return _int64(sum(int(i) for i in items))
    raise TypeError("sum: list elements must all be int, all uint or all double")


def _extreme(receiver: Any, pick: Callable[[list[Any]], Any], what: str) -> Any:
    items = _list(receiver, what)
    if not items:
        raise ValueError(f"{what} called on empty list")
    _ordered(items, what)
    return pick(items)


def min_list(receiver: Any) -> Any:
    return _extreme(receiver, min, "min")


def max_list(receiver: Any) -> Any:
    return _extreme(receiver, max, "max")


# ---------------------------------------------------------------- ext.Sets


def _contains_all(haystack: list[Any], needles: list[Any]) -> bool:
    return all(any(cel_equal(h, n) for h in haystack) for n in needles)


def sets_contains(left: Any, right: Any) -> celtypes.BoolType:
    return cel_bool(_contains_all(_list(left, "sets.contains"), _list(right, "sets.contains")))


def sets_equivalent(left: Any, right: Any) -> celtypes.BoolType:
    a, b = _list(left, "sets.equivalent"), _list(right, "sets.equivalent")
    return cel_bool(_contains_all(a, b) and _contains_all(b, a))


def sets_intersects(left: Any, right: Any) -> celtypes.BoolType:
    a, b = _list(left, "sets.intersects"), _list(right, "sets.intersects")
    return cel_bool(any(cel_equal(x, y) for x in a for y in b))


# ---------------------------------------------------------------- operators (cross-type numeric ordering)


def _order_kind(value: Any) -> type | None:
    """The kind `<` is defined on within itself; None when the value has no ordering."""
    if isinstance(value, celtypes.BoolType):
        return bool
    for kind in (str, bytes, celtypes.TimestampType, celtypes.DurationType):
        if isinstance(value, kind):
            return kind
    return None


def _ordering(op: Callable[[Any, Any], bool], name: str) -> CelFunction:
    """Kubernetes enables cross-type numeric comparisons (`1 < 2.5`, `1u <= 2`); any other
    mix (bool with int, Quantity, lists) is "no such overload", as in cel-go."""

    def compare(left: Any, right: Any) -> celtypes.BoolType:
        if type(left) is celtypes.IntType and type(right) is celtypes.IntType:  # the common case, fast
            return cel_bool(op(int(left), int(right)))
        if _is_number(left) and _is_number(right):
            # Plain Python int/float compare exactly across types; celtypes refuse mixing.
            return cel_bool(op(_plain(left), _plain(right)))
        kind = _order_kind(left)
        if kind is None or kind is not _order_kind(right):
            if isinstance(left, (Quantity, Semver)) or isinstance(right, (Quantity, Semver)):
                raise TypeError(f"no such overload: {name} is not defined for Quantity/Semver (use compareTo)")
            raise TypeError(f"no such overload: {name}")
        return cel_bool(op(left, right))

    compare.__name__ = f"ordering_{name.strip('_')}"
    return compare


def _no_bools(left: Any, right: Any, name: str) -> None:
    # BoolType is an int subclass: without this `1 + true` would be 2.
    if isinstance(left, celtypes.BoolType) or isinstance(right, celtypes.BoolType):
        raise TypeError(f"no such overload: {name} on bool")


def _int_arithmetic(op: Callable[[int, int], int], name: str) -> CelFunction:
    """int64 arithmetic without celpy's per-call wrapper construction; other types fall back."""
    fallback = base_functions[name]

    def arithmetic(left: Any, right: Any) -> Any:
        if type(left) is celtypes.IntType and type(right) is celtypes.IntType:
            result = op(int(left), int(right))
            if not INT64_MIN <= result <= INT64_MAX:
                raise ValueError("integer overflow")
            return int.__new__(celtypes.IntType, result)
        _no_bools(left, right, name)
        return fallback(left, right)

    arithmetic.__name__ = f"arithmetic_{name.strip('_')}"
    return arithmetic


def _checked_arithmetic(name: str) -> CelFunction:
    fallback = base_functions[name]

    def arithmetic(left: Any, right: Any) -> Any:
        _no_bools(left, right, name)
        return fallback(left, right)

    arithmetic.__name__ = f"arithmetic_{name.strip('_')}"
    return arithmetic


# ---------------------------------------------------------------- registries

_STANDARD_GLOBALS = (
    "size", "int", "uint", "double", "string", "bytes", "bool", "duration", "timestamp",
)  # fmt: skip
_STANDARD_METHODS = (
    "size", "contains", "startsWith", "endsWith",
    "getDate", "getDayOfMonth", "getDayOfWeek", "getDayOfYear", "getFullYear", "getMonth",
    "getHours", "getMilliseconds", "getMinutes", "getSeconds",
)  # fmt: skip

_DECIMAL_INT = re.compile(r"[+-]?[0-9]+")


def to_int(value: Any) -> celtypes.IntType:
    """int(x); strings of decimal digits take a fast path (celpy's IntType() is slow to construct)."""
    if isinstance(value, str) and _DECIMAL_INT.fullmatch(value):
        parsed = int(str.__str__(value))
        if INT64_MIN <= parsed <= INT64_MAX:
            return int.__new__(celtypes.IntType, parsed)
    # celpy's table is typed as returning any CEL value; its int() returns an IntType or raises.
    return cast(celtypes.IntType, base_functions["int"](value))


GLOBALS: dict[str, CelFunction] = {name: base_functions[name] for name in _STANDARD_GLOBALS}
GLOBALS["int"] = to_int
GLOBALS.update(
    {
        "matches": matches,
        "quantity": quantity,
        "isQuantity": is_quantity,
        "semver": semver,
        "isSemver": is_semver,
        "strings.quote": quote,
        "sets.contains": sets_contains,
        "sets.equivalent": sets_equivalent,
        "sets.intersects": sets_intersects,
    }
)

METHODS: dict[str, CelFunction] = {name: base_functions[name] for name in _STANDARD_METHODS}
METHODS.update(
    {
        "matches": matches,
        "sign": sign,
        "isInteger": is_integer,
        "asInteger": as_integer,
        "asApproximateFloat": as_approximate_float,
        "add": add,
        "sub": sub,
        "isGreaterThan": is_greater_than,
        "isLessThan": is_less_than,
        "compareTo": compare_to,
        "major": major,
        "minor": minor,
        "patch": patch,
        "charAt": char_at,
        "indexOf": index_of,
        "lastIndexOf": last_index_of,
        "lowerAscii": lower_ascii,
        "upperAscii": upper_ascii,
        "replace": replace,
        "split": split,
        "substring": substring,
        "trim": trim,
        "join": join,
        "format": format_string,
        "find": find,
        "findAll": find_all,
        "isSorted": is_sorted,
        "sum": sum_list,
        "min": min_list,
        "max": max_list,
    }
)

OPERATORS: dict[str, CelFunction] = {
    "_<_": _ordering(lambda a, b: a < b, "_<_"),
    "_<=_": _ordering(lambda a, b: a <= b, "_<=_"),
    "_>_": _ordering(lambda a, b: a > b, "_>_"),
    "_>=_": _ordering(lambda a, b: a >= b, "_>=_"),
    "_+_": _int_arithmetic(lambda a, b: a + b, "_+_"),
    "_-_": _int_arithmetic(lambda a, b: a - b, "_-_"),
    "_*_": _int_arithmetic(lambda a, b: a * b, "_*_"),
    "_/_": _checked_arithmetic("_/_"),
    "_%_": _checked_arithmetic("_%_"),
    "_==_": _equals,
    "_!=_": _not_equals,
    "_in_": _contains,
}

# Kubernetes has these, this implementation does not: a use is a CelNotSupported error,
# never a silently different answer.
NOT_SUPPORTED: frozenset[str] = frozenset(
    {
        "url", "isURL", "getScheme", "getHost", "getHostname", "getPort", "getEscapedPath", "getQuery",
        "ip", "isIP", "cidr", "isCIDR", "isCanonical", "family", "isUnspecified", "isLoopback",
        "isGlobalUnicast", "isLinkLocalMulticast", "isLinkLocalUnicast", "containsIP", "containsCIDR",
        "prefixLength", "masked",
        "format.dns1123Label", "format.dns1123Subdomain", "format.dns1035Label", "format.qualifiedName",
        "format.dns1123LabelPrefix", "format.dns1123SubdomainPrefix", "format.dns1035LabelPrefix",
        "format.labelValue", "format.uri", "format.uuid", "format.byte", "format.date", "format.datetime",
        "format.named", "validate",
        "optional.of", "optional.ofNonZeroValue", "optional.none", "orValue", "value", "hasValue", "or",
        "transformMap", "transformMapEntry",
        "distinct", "lists.range", "reverse", "slice", "flatten", "sort", "sortBy",
        "authorizer", "path", "group", "resource", "check", "allowed", "reason", "errored", "error",
        "type",
    }
)  # fmt: skip

# Names that look like a receiver but are a namespace: `sets.contains(a, b)`.
NAMESPACES: frozenset[str] = frozenset({"sets", "strings", "cel", "optional", "lists", "math", "format"})

# Type identifiers (`type(x) == int`): valid Kubernetes CEL, but type values are not implemented.
TYPE_NAMES: frozenset[str] = frozenset({"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type"})
