"""Did-you-mean suggestions for names people type (classes, profiles, vendors, flags, attributes): difflib.

One place decides what counts as close, so every command suggests the same way: case is ignored,
and at most a few names come back, never the whole list.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

CUTOFF = 0.6  # difflib's ratio; 0.6 keeps `dgx-h10` -> dgx-h100 and drops unrelated names
MARGIN = 0.05  # names kept besides the best: those within this much of its ratio


def close_matches(word: str, choices: Iterable[str], limit: int = 3, cutoff: float = CUTOFF) -> list[str]:
    """The choices closest to `word`, best first (case-insensitive; an exact case-only difference comes first)."""
    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(choice.lower(), choice)
    if word.lower() in by_lower:
        return [by_lower[word.lower()]]
    found = _closest(word.lower(), list(by_lower), limit, cutoff) or _same_parts(word.lower(), list(by_lower), limit)
    return [by_lower[name] for name in found]


def _closest(word: str, choices: list[str], limit: int, cutoff: float) -> list[str]:
    """difflib's close matches, keeping only those nearly as close as the best (a typo has one answer, not three)."""
    found = difflib.get_close_matches(word, choices, n=limit, cutoff=cutoff)
    ratios = [difflib.SequenceMatcher(None, word, name).ratio() for name in found]
    return [name for name, ratio in zip(found, ratios, strict=True) if ratio >= ratios[0] - MARGIN]


def _same_parts(word: str, choices: list[str], limit: int) -> list[str]:
    """Names made of the same parts in another order (`nvidia-mig-1g.5gb` -> mig-1g.5gb.nvidia.com), which
    difflib's sequence ratio misses: more than half the parts of both shared."""
    parts = set(re.split(r"[^a-z0-9]+", word)) - {""}
    scored = []
    for choice in choices:
        theirs = set(re.split(r"[^a-z0-9]+", choice)) - {""}
        score = len(parts & theirs) / len(parts | theirs) if parts | theirs else 0.0
        if score > 0.5:
            scored.append((-score, choice))
    return [choice for _, choice in sorted(scored)[:limit]]


def did_you_mean(word: str, choices: Iterable[str], limit: int = 3) -> str:
    """`did you mean 'a' or 'b'?` for the close choices; "" when none is close."""
    found = close_matches(word, choices, limit)
    if not found:
        return ""
    return "did you mean " + " or ".join(repr(name) for name in found) + "?"


def unknown(what: str, word: str, choices: Iterable[str], listed: int = 12) -> str:
    """`unknown profile 'x'; did you mean 'y'?` or, with nothing close, the choices when few (else how many)."""
    names = list(dict.fromkeys(choices))  # in the caller's order (most common first), once each
    hint = did_you_mean(word, names)
    if hint:
        return f"unknown {what} {word!r}; {hint}"
    if len(names) <= listed:
        return f"unknown {what} {word!r}; choose from {', '.join(names)}"
    return f"unknown {what} {word!r} (none of the {len(names)} known is close)"
