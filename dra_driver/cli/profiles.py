"""`dra-driver profiles`: the shipped hardware profiles, one line each (name, vendors, devices, what it is).

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
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.set_defaults(func=run)


def _devices(name: str) -> int:
    from dra_driver.sources import fleet as fleets

    return sum(len(s["spec"].get("devices") or []) for s in fleets.simulated(name, 1).slices)


def rows() -> list[dict[str, Any]]:
    out = []
    for name in sorted(available_profiles()):
        profile = load_profile(name)
        out.append({"name": name, "vendors": sorted(profile.sections), "devices": _devices(name), "description": " ".join(profile.description.split())})
    return out


def run(args: argparse.Namespace) -> int:
    from dra_driver.fleet.render import format_table

    found = rows()
    if args.output == "json":
        print(json.dumps(found, indent=2))
        return 0
    print("\n".join(format_table(["NAME", "VENDORS", "DEVICES", "DESCRIPTION"], [[r["name"], ",".join(r["vendors"]), str(r["devices"]), r["description"]] for r in found])))
    return 0
