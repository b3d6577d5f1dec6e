"""Small pieces of wording every command's lines share."""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """`1 node`, `2 nodes` (`many` for a noun whose plural is not noun + s)."""
    return f"{count} {noun if count == 1 else (many or noun + 's')}"
