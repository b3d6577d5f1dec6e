"""How much input a command accepts, and the process-wide setting the CLI's global flags change.

Every limit keeps one run within about 2 s and 300 MB on a 2-core machine (the
figures behind each default are in docs/performance.md, "Input limits"):

- `max_bytes` bounds reading: it is checked while reading, so an endless input
  (/dev/zero, a pipe that never closes) stops after max_bytes + 1 bytes;
- `max_depth` bounds nesting, checked before any recursive code sees the data;
- `max_nodes` bounds the values a YAML/JSON parser builds, counting every value an
  alias expands to again (so an alias bomb is refused like any other huge input).
  Parsing cost and memory grow with values, not bytes: "- 1" lines cost ~4 bytes
  a value, so a byte limit alone would allow 8 million values in 32 MiB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

MIB = 1024 * 1024
DEFAULT_MAX_BYTES = 32 * MIB
DEFAULT_MAX_DEPTH = 100
DEFAULT_MAX_NODES = 250_000
# pydantic-core parses JSON ~10x faster than libyaml events become objects: JSON
# inputs may hold this many times more values (a 10,000-device fleet is ~1.5 M).
JSON_NODES_FACTOR = 8
# migrate's round trip (ruamel keeps comments and layout: load, edit, dump) costs
# ~170 us a value when every document changes and ~0.5 us a byte; with the process
# start-up, 6,900 values took 1.9 s and 1 MiB 1.3 s (docs/performance.md, "Input limits").
ROUND_TRIP_MAX_NODES = 7_500
ROUND_TRIP_MAX_BYTES = 1 * MIB
ROUND_TRIP_WHY = "migrate edits YAML with a comment-keeping parser about 50x slower than the others"

_UNITS = {"": 1, "k": 1000, "ki": 1024, "m": 1000**2, "mi": MIB, "g": 1000**3, "gi": 1024**3}
_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?)?b?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Limits:
    max_bytes: int = DEFAULT_MAX_BYTES
    max_depth: int = DEFAULT_MAX_DEPTH
    max_nodes: int = DEFAULT_MAX_NODES
    # Which of max_bytes / max_nodes the user chose (global flags): a chosen value is
    # kept by for_round_trip, a default is lowered to the round-trip budget.
    bytes_chosen: bool = False
    nodes_chosen: bool = False
    why: str = ""  # appended to a refusal, saying why this command's limit is lower

    @property
    def max_json_values(self) -> int:
        return self.max_nodes * JSON_NODES_FACTOR

    def for_round_trip(self) -> Limits:
        """The limits for ruamel's round-trip loader (migrate), unless the user chose their own."""
        return replace(
            self,
            max_bytes=self.max_bytes if self.bytes_chosen else min(self.max_bytes, ROUND_TRIP_MAX_BYTES),
            max_nodes=self.max_nodes if self.nodes_chosen else min(self.max_nodes, ROUND_TRIP_MAX_NODES),
            why="" if self.bytes_chosen and self.nodes_chosen else ROUND_TRIP_WHY,
        )

    def refusal(self, flag: str, example: str) -> str:
        """The end of every limit message: why, and which global flag raises it."""
        reason = f" ({self.why})" if self.why else ""
        return f"{reason}; raise the limit with the global flag {flag}, e.g. dra-driver {flag} {example} ..."


def parse_size(text: str) -> int:
    """Bytes from `text` such as 64Mi, 100M, 1048576 (argparse type for --max-input-size)."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size; write bytes or a number with Ki, Mi, Gi, K, M or G (e.g. 64Mi)")
    value = int(match.group(1)) * _UNITS[(match.group(2) or "").lower()]
    if value < 1:
        raise ValueError("must be at least 1 byte")
    return value


def human_size(value: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", MIB), ("KiB", 1024)):
        if value >= factor and value % factor == 0:
            return f"{value // factor} {unit}"
    return f"{value} bytes"


def flag_size(value: int) -> str:
    """`value` as --max-input-size takes it (128Mi, or plain bytes)."""
    for unit, factor in (("Gi", 1024**3), ("Mi", MIB), ("Ki", 1024)):
        if value >= factor and value % factor == 0:
            return f"{value // factor}{unit}"
    return str(value)


_active = Limits()


def active() -> Limits:
    """The limits of this process (the CLI sets them from its global flags)."""
    return _active


def configure(limits: Limits) -> None:
    global _active
    _active = limits
