"""`dra-driver profiles`: the shipped hardware profiles, one line each (name, vendors, devices, what it is).

The table cuts each description to fit a terminal line (-o wide prints it whole; -o json and -o yaml
for tools).

The names --profile takes in discover, demo, run, explain, fleet and template. Devices are counted
from a simulated discovery of each profile (static partitioning: whole GPUs and existing MIG devices
or partitions), so the count is what `discover --profile NAME` would publish.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from dra_driver.backend.hardware_profiles import available_profiles, load_profile


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("profiles", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table",
                        help="table (descriptions cut to one line of about 120 characters), wide (whole), json or yaml (default: table)")  # fmt: skip
    parser.set_defaults(func=run)


LINE_WIDTH = 120
COLUMN_GAP = 2  # what format_table puts between columns


def _devices(name: str) -> int:
    from dra_driver.sources import fleet as fleets

    return sum(len(s["spec"].get("devices") or []) for s in fleets.simulated(name, 1).slices)


def rows() -> list[dict[str, Any]]:
    out = []
    for name in sorted(available_profiles()):
        profile = load_profile(name)
        out.append(
            {"name": name, "vendors": sorted(profile.sections), "devices": _devices(name), "description": " ".join(profile.description.split())}
        )
    return out


def run(args: argparse.Namespace) -> int:
    from dra_driver.fleet.render import format_table

    found = rows()
    if args.output == "json":
        print(json.dumps(found, indent=2))
        return 0
    if args.output == "yaml":
        import yaml

        print(yaml.safe_dump(found, sort_keys=False), end="")
        return 0
    header = ["NAME", "VENDORS", "DEVICES", "DESCRIPTION"]
    table = [[r["name"], ",".join(r["vendors"]), str(r["devices"]), r["description"]] for r in found]
    if args.output == "table":
        before = sum(max(len(cell) for cell in [header[i], *(r[i] for r in table)]) + COLUMN_GAP for i in range(3))
        table = [[*r[:3], shortened(r[3], max(LINE_WIDTH - before, 20))] for r in table]
    print("\n".join(format_table(header, table)))
    return 0


def shortened(text: str, width: int) -> str:
    """`text` cut at a word to at most `width` characters, ending in '...' when cut."""
    if len(text) <= width:
        return text
    return text[: width - 3].rsplit(" ", 1)[0].rstrip(",;:") + "..."
