"""How a command reports input it cannot use: one line a problem on stderr, exit code 2."""

from __future__ import annotations

import sys

from dra_driver.errors import DraError, ValidationError
from dra_driver.explain import InputError

EXIT_INVALID = 2


def report(exc: DraError) -> int:
    """Print `exc` for a person and return EXIT_INVALID."""
    if isinstance(exc, InputError):
        for error in exc.errors:  # one line a problem, so each can be read (and grepped) alone
            print(f"invalid input: {error}", file=sys.stderr)
    elif isinstance(exc, ValidationError):
        print(f"invalid input: {exc}", file=sys.stderr)
    else:
        print(f"error: {exc}", file=sys.stderr)
    return EXIT_INVALID
