"""The two Kubernetes CEL object types DRA selectors use: Quantity and Semver.

Both compare only through their methods (compareTo, isGreaterThan, isLessThan), as in
Kubernetes; `==` is semantic ("1Gi" == "1024Mi"), ordering operators (`<`) are not defined
and evaluate to a "no such overload" error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_UP, Decimal, InvalidOperation, localcontext
from typing import Any

from celpy import celtypes

from dra_driver.model.quantity import parse_quantity

def cel_type_name(value: Any) -> str:
    """A value's CEL type name for messages users read (never a Python class name)."""
    for kind, name in _CEL_NAMES:
        if isinstance(value, kind):
            return name
    if value is None:
        return "null"
    return cel_type_name(value).replace("Type", "").lower()


INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
_NANO = Decimal("1e-9")
_BINARY_SUFFIXES = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_SUFFIXES = frozenset({"", "n", "u", "m", "k", "M", "G", "T", "P", "E", *_BINARY_SUFFIXES})
_EXPONENT = re.compile(r"^[eE][-+]?[0-9]+\Z")
# apimachinery resource.ErrFormatWrong, verbatim: Go's tests match this text.
_QUANTITY_PATTERN = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_QUANTITY_SHAPE = re.compile(_QUANTITY_PATTERN)
QUANTITY_FORMAT_ERROR = f"quantities must match the regular expression '{_QUANTITY_PATTERN}'"


@dataclass(frozen=True, eq=False)
class Quantity:
    """A Kubernetes resource.Quantity inside CEL; `value` is exact (Decimal)."""

    value: Decimal
    text: str

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Parse with the kubernetes client's parser; ValueError when `text` is not a quantity."""
        if not isinstance(text, str) or isinstance(text, bool):
            raise TypeError(f"quantity() takes a string, got {cel_type_name(text)}")
        text = str.__str__(text)  # a plain str: messages must never show a CEL wrapper type
        shape = _QUANTITY_SHAPE.match(text)
        if shape is None:
            # The client parser tolerates spaces; Kubernetes' ParseQuantity does not.
            raise ValueError(QUANTITY_FORMAT_ERROR)
        try:
            exact = Decimal(parse_quantity(text))
        except (ValueError, TypeError, InvalidOperation, ArithmeticError) as exc:
            # apimachinery's ParseQuantity: a suffix it does not know, else a bad number.
            valid_suffix = shape.group(2) in _SUFFIXES or _EXPONENT.match(shape.group(2)) is not None
            raise ValueError("unable to parse numeric part of quantity" if valid_suffix else "unable to parse quantity's suffix") from exc
        return cls(_as_kubernetes_stores(exact, text.endswith(_BINARY_SUFFIXES)), text)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self.value == other.value
        return False

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(("Quantity", self.value))

    def __repr__(self) -> str:
        return f"Quantity({self.text!r})"

    def compare(self, other: Quantity) -> int:
        return (self.value > other.value) - (self.value < other.value)


def _as_kubernetes_stores(value: Decimal, binary_si: bool) -> Decimal:
    """Apply resource.ParseQuantity's normalisation (apimachinery quantity.go).

    Kubernetes rounds a non-zero magnitude *up* (away from zero) to nano precision, so
    "1.0000000001" and "1.000000001" are the same quantity; and it caps binary-SI values
    ("Ki".."Ei") at the int64 maximum.
    """
    magnitude = abs(value)
    exponent = magnitude.as_tuple().exponent
    if magnitude and isinstance(exponent, int) and exponent < -9:
        with localcontext() as context:
            context.prec = 1000  # exact: quantize must not run out of digits
            magnitude = magnitude.quantize(_NANO, rounding=ROUND_UP)
    if binary_si and magnitude > INT64_MAX:
        magnitude = Decimal(INT64_MAX)
    return -magnitude if value < 0 else magnitude


# semver.org 2.0.0: numeric parts without leading zeros, optional pre-release and build.
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
# The Kubernetes `normalize` mode: optional "v", missing minor/patch, leading zeros.
_LOOSE = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?((?:[-+].*)?)\Z")


@dataclass(frozen=True, eq=False)
class Semver:
    """A semantic version inside CEL (the DRA `version` attribute type)."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...]
    build: str
    text: str

    @classmethod
    def parse(cls, text: str, normalize: bool = False) -> Semver:
        """Strict semver 2.0.0; with `normalize`, accept "v1", "1.2", "01.2.3" as Kubernetes does."""
        if not isinstance(text, str) or isinstance(text, bool):
            raise TypeError(f"semver() takes a string, got {cel_type_name(text)}")
        source = text
        if normalize:
            loose = _LOOSE.match(text)
            if loose:
                major, minor, patch, rest = loose.groups()
                source = f"{int(major)}.{int(minor or 0)}.{int(patch or 0)}{rest}"
        match = _SEMVER.match(source)
        if not match:
            raise ValueError(semver_error(str.__str__(source)))
        major, minor, patch, pre, build = match.groups()
        return cls(int(major), int(minor), int(patch), tuple(pre.split(".")) if pre else (), build or "", text)

    def compare(self, other: Semver) -> int:
        """Precedence per semver 2.0.0 section 11; build metadata is ignored."""
        left = (self.major, self.minor, self.patch)
        right = (other.major, other.minor, other.patch)
        if left != right:
            return 1 if left > right else -1
        return _compare_prerelease(self.prerelease, other.prerelease)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare(other) == 0

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(("Semver", self.major, self.minor, self.patch, self.prerelease))

    def __repr__(self) -> str:
        return f"Semver({self.text!r})"


def semver_error(text: str) -> str:
    """Why `text` is not a semantic version, in the words of the Go library Kubernetes uses (blang/semver)."""
    if not text:
        return "Version string empty"
    parts = text.split(".", 2)
    if len(parts) != 3:
        return "No Major.Minor.Patch elements found"
    for label, part in (("major", parts[0]), ("minor", parts[1]), ("patch", re.split(r"[-+]", parts[2], maxsplit=1)[0])):
        if not part.isascii() or not part.isdigit():
            return f"Invalid character(s) found in {label} number {_go_quote(part)}"
        if len(part) > 1 and part.startswith("0"):
            return f"{label.capitalize()} number must not contain leading zeroes {_go_quote(part)}"
    return f"Invalid pre-release or build metadata in {_go_quote(text)}"


def _go_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _compare_prerelease(left: tuple[str, ...], right: tuple[str, ...]) -> int:
    if left == right:
        return 0
    if not left:  # a release ranks above any of its pre-releases
        return 1
    if not right:
        return -1
    for a, b in zip(left, right):
        if a == b:
            continue
        a_num, b_num = a.isdigit(), b.isdigit()
        if a_num and b_num:
            return 1 if int(a) > int(b) else -1
        if a_num != b_num:  # numeric identifiers rank below alphanumeric ones
            return -1 if a_num else 1
        return 1 if a > b else -1
    return 1 if len(left) > len(right) else -1


# Order matters: bool before int (BoolType is an int), CEL wrappers before Python bases.
_CEL_NAMES: tuple[tuple[type, str], ...] = (
    (celtypes.BoolType, "bool"),
    (bool, "bool"),
    (celtypes.UintType, "uint"),
    (int, "int"),
    (float, "double"),
    (str, "string"),
    (bytes, "bytes"),
    (list, "list"),
    (dict, "map"),
    (Quantity, "Quantity"),
    (Semver, "Semver"),
    (celtypes.DurationType, "google.protobuf.Duration"),
    (celtypes.TimestampType, "google.protobuf.Timestamp"),
)
