"""The error explain raises for input it cannot explain."""

from __future__ import annotations

from dra_driver.common.errors import FieldError, UsageError


class InputError(UsageError):
    """Input that cannot be explained; carries field errors."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))
