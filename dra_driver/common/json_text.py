"""JSON from a file the driver did not necessarily write intact: every failure is a ValueError.

json.loads raises RecursionError (not ValueError) on nesting past the interpreter's recursion limit, so a
damaged or hostile file would escape the `except ValueError` of every reader of state and status files.
"""

from __future__ import annotations

import json
from typing import Any


def loads(raw: str | bytes) -> Any:
    """json.loads whose every failure, too deep nesting included, is a ValueError."""
    try:
        return json.loads(raw)
    except RecursionError as exc:
        raise ValueError("JSON nested deeper than the parser can follow") from exc
