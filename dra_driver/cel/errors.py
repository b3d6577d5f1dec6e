"""Typed CEL errors. Each names the expression so a caller can point at the selector."""

from __future__ import annotations

from dra_driver.common.errors import DraError


def _shorten(expression: str, limit: int = 120) -> str:
    flat = " ".join(expression.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class CelError(DraError):
    """Base of every CEL error: `expression` is the source text, `message` the reason."""

    kind = "CEL error"

    def __init__(self, expression: str, message: str) -> None:
        self.expression = expression
        self.message = message
        super().__init__(f"{self.kind}: {message} (in {_shorten(expression)!r})")


class CelCompileError(CelError):
    """The expression is rejected before evaluation: syntax, length, undeclared names."""

    kind = "CEL compile error"


class CelNotSupported(CelCompileError):
    """Valid Kubernetes CEL that this implementation cannot evaluate with identical results."""

    kind = "CEL feature not supported"


class CelRuntimeError(CelError):
    """Evaluation failed (missing attribute, bad argument) or did not produce a bool.

    The Kubernetes scheduler fails the claim on such an error; it is never "no match".
    """

    kind = "CEL runtime error"


class CelBudgetExceeded(CelRuntimeError):
    """Evaluation spent more than the cost budget (Kubernetes: 1,000,000 per selector)."""

    kind = "CEL cost budget exceeded"
