"""`dra-driver discover`: print the ResourceSlices this node would publish."""

from __future__ import annotations

import argparse
import json
import os
import socket
from collections.abc import Mapping
from typing import Any

import yaml

from dra_driver.common.wording import plural
from dra_driver.cli import failures
from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.model import as_list, render_pool, validate_slices
from dra_driver.backend.registry import open_backends
from dra_driver.backend.interface import BackendSettings
from dra_driver.backend.vocabulary import FAMILY, INTERCONNECT, PARTITION
from dra_driver.node.settings import env_name


def default_node_name() -> str:
    return os.environ.get(env_name("node_name")) or socket.gethostname().split(".")[0].lower() or "node"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "discover",
        description="Discover accelerators (or simulate a hardware profile) and print the ResourceSlices this node would publish.",
    )
    parser.add_argument("--profile", metavar="NAME|FILE", help="simulate a shipped hardware profile (e.g. dgx-h100) or a profile file")
    parser.add_argument(
        "--partitioning",
        choices=("static", "dynamic"),
        default="static",
        help="static: publish existing MIG devices/partitions; dynamic: every placement with shared counters (needs DRAPartitionableDevices)",
    )
    parser.add_argument(
        "--consumable-gpu-memory",
        action="store_true",
        help="publish as `dra-driver run --consumable-gpu-memory` does: whole NVIDIA GPUs with allowMultipleAllocations and a memory request policy",
    )
    parser.add_argument("-o", "--output", choices=("yaml", "json", "table"), default="yaml")
    parser.add_argument(
        "--node-name", default=default_node_name(), help=f"node name for the pools (default: ${env_name('node_name')} or the host name)"
    )
    parser.add_argument("--vendors", help="comma-separated vendors to use (default: all installed)")
    parser.set_defaults(func=run)


def collect_slices(settings: BackendSettings, profile_name: str | None, vendors: list[str] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Slices of every available backend (validated), and the reasons others are unavailable."""
    profile = load_profile(profile_name) if profile_name else None
    opened = open_backends(settings, profile=profile, vendors=vendors)
    try:
        slices: list[dict[str, Any]] = []
        for backend in opened.backends:
            # Same layout as the publisher (room kept for health taints), so what discover
            # prints is what the daemon publishes.
            pool = render_pool(backend.discover(), node_name=settings.node_name, reserve_for_taints=True)
            validate_slices(pool, subject=f"pool of {backend.driver_name}")
            slices.extend(pool)
        return slices, [str(reason) for reason in opened.unavailable]
    finally:
        opened.close()


def _attribute_value(device: Mapping[str, Any], driver: str, name: str) -> str:
    attributes = device.get("attributes") or {}
    entry = attributes.get(name) or attributes.get(f"{driver}/{name}")
    if not entry:
        return ""
    value = next(iter(entry.values()))
    return ("true" if value else "false") if isinstance(value, bool) else str(value)  # as YAML and CEL write it


def render_table(slices: list[dict[str, Any]]) -> str:
    header = ("DRIVER", "DEVICE", "TYPE", "PRODUCT", "FAMILY", "MEMORY", "PARTITION", "INTERCONNECT", "COUNTERS")
    rows: list[tuple[str, ...]] = [header]
    counter_sets = 0
    for obj in slices:
        spec = obj["spec"]
        driver = spec["driver"]
        counter_sets += len(spec.get("sharedCounters") or [])
        for device in spec.get("devices") or []:
            consumes = ",".join(c["counterSet"] for c in device.get("consumesCounters") or [])
            rows.append(
                (
                    driver,
                    device["name"],
                    _attribute_value(device, driver, "type"),
                    _attribute_value(device, driver, "productName") or _attribute_value(device, driver, "model"),
                    _attribute_value(device, driver, FAMILY),
                    str(((device.get("capacity") or {}).get("memory") or {}).get("value", "")),
                    _attribute_value(device, driver, PARTITION),
                    _attribute_value(device, driver, INTERCONNECT),
                    consumes,
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows]
    devices = len(rows) - 1
    lines.append(f"\n{plural(devices, 'device')}, {plural(counter_sets, 'counter set')} in {plural(len(slices), 'slice')}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    settings = BackendSettings(node_name=args.node_name, partitioning=args.partitioning, consumable_gpu_memory=args.consumable_gpu_memory)
    vendors = [v.strip() for v in args.vendors.split(",") if v.strip()] if args.vendors else None
    slices, unavailable = collect_slices(settings, args.profile, vendors)  # a bad profile: ProfileError/InputError, exit 2
    for reason in unavailable:
        failures.info(f"note: {reason}")
    if args.output == "json":
        print(json.dumps(as_list(slices), indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(as_list(slices), sort_keys=False), end="")
    else:
        print(render_table(slices))
    return 0
