"""`dra-driver fleet`: what a fleet has, what is free, and who holds each device.

Reads a cluster (--kubeconfig; read only: one paginated LIST each of ResourceSlices,
ResourceClaims, Pods, DeviceClasses and Nodes) or fleet files (--fleet), and prints per
node, driver and device kind how many devices are allocated, free, tainted or blocked
(their shared counters are used up), the shared counters in use, and the claim and pods
holding each device. A CLASS argument keeps only the devices that DeviceClass selects
and lists which of them are free.

Exit codes: 0 shown, 2 invalid input (fleet, arguments, unknown class).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from dra_driver.cli import failures
from dra_driver.cli.fleet_options import add_fleet_source, fleet_source
from dra_driver.common.errors import DraError
from dra_driver.fleet import Filters, ViewRequest, fleet_view, vendor_filter
from dra_driver.fleet.picture import to_html, to_svg
from dra_driver.fleet.render import to_data, to_table

EXIT_OK = 0


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "fleet",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "device_class", nargs="?", metavar="CLASS", help="only devices this DeviceClass selects (shipped or in the fleet), and which of them are free"
    )
    add_fleet_source(
        parser,
        "fleet (one kind)",
        "ResourceSlices, ResourceClaims, Pods, DeviceClasses: kubectl List, multi-doc YAML, or a directory (repeatable)",
        "read the cluster (read only: one paginated LIST each of slices, claims, pods, classes, nodes)",
    )
    filters = parser.add_argument_group("filters (repeatable; devices must pass all kinds)")
    filters.add_argument("--node", action="append", default=[], metavar="NAME", help="node name or shell pattern (gpu-node-1*)")
    filters.add_argument("--vendor", action="append", default=[], metavar="VENDOR", help="nvidia, amd, gaudi (or intel)")
    filters.add_argument("-n", "--namespace", action="append", default=[], metavar="NS", help="only devices held by claims in this namespace")
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "wide", "json", "yaml", "html", "svg"),
        default="table",
        help="table; wide (the table and every device: pool, memory, state, claims, pods, why not free); json or yaml (everything); "
        "html (a self-contained page: the picture and the table's parts) or svg (the picture)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        filters = Filters(nodes=tuple(args.node), vendors=vendor_filter(tuple(args.vendor)), namespaces=tuple(args.namespace))
        view = fleet_view(ViewRequest(fleet_source(args), filters, args.device_class))
    except DraError as exc:
        return failures.report(exc)
    if args.output == "json":
        print(json.dumps(to_data(view), indent=2))
    elif args.output == "yaml":
        sys.stdout.write(yaml.safe_dump(to_data(view), sort_keys=False))
    elif args.output == "html":
        sys.stdout.write(to_html(view))
    elif args.output == "svg":
        sys.stdout.write(to_svg(view))
    else:
        sys.stdout.write(to_table(view, wide=args.output == "wide"))
    return EXIT_OK
