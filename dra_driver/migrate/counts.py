"""Device counts from resource quantities, and the placeholders that stand where a count belongs."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from dra_driver.model.quantity import parse_quantity

# What a count that is still to be substituted looks like, and what to call it.
_PLACEHOLDERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\{\{.*\}\}"), "a template action ({{ ... }}: Helm, Go templates, Jinja)"),
    (re.compile(r"\$\$?\{?[A-Za-z_][A-Za-z0-9_]*\}?"), "an environment-variable reference ($NAME or ${NAME}: envsubst, shell)"),
    (re.compile(r"\$\(?[A-Za-z_][A-Za-z0-9_]*\)?"), "a variable reference ($(NAME): kustomize vars, Tekton)"),
    # A name in capitals (PLACEHOLDER_NUM_GPU, NUM_GPUS), or marked like <gpus>, __GPUS__, %GPUS%, @GPUS@
    (re.compile(r"^(?:[A-Z][A-Z0-9]*_[A-Z0-9_]*|[A-Z]{2,}[0-9]*|<[^<>]+>|__\w+__|%\w+%|@\w+@)\Z"),
     "a placeholder name to be replaced before applying"),
)


def device_count(value: Any) -> int | None:
    """The whole number of devices `value` asks for; None when it is not a whole number.

    A null quantity (`nvidia.com/gpu:` with no value) decodes as zero in Kubernetes, so it is 0 here.
    """
    if value is None:
        return 0
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        number = Decimal(parse_quantity(str(value)))
    except (ValueError, TypeError, InvalidOperation):
        return None
    if number != number.to_integral_value():
        return None
    return int(number)


def placeholder_kind(value: Any) -> str | None:
    """What kind of placeholder a count that is not a number is (env-style, template, a marked name); None if none."""
    if not isinstance(value, str) or device_count(value) is not None:
        return None
    for pattern, what in _PLACEHOLDERS:
        if pattern.search(value.strip()):
            return what
    return None
