"""The fleet-source arguments explain, template and fleet share: --fleet | --profile [--nodes --partitioning] | --kubeconfig."""

from __future__ import annotations

import argparse

from dra_driver.explain import FleetSource


def add_fleet_source(parser: argparse.ArgumentParser, title: str, files_help: str, kubeconfig_help: str) -> None:
    source = parser.add_argument_group(title)
    source.add_argument("--fleet", action="append", default=[], metavar="DIR|FILE", help=files_help)
    source.add_argument("--profile", help="simulate a hardware profile on --nodes identical nodes")
    source.add_argument("--nodes", type=int, default=1, help="number of simulated nodes for --profile (default 1)")
    source.add_argument("--partitioning", choices=("static", "dynamic"), default="static", help="MIG/partition publishing mode for --profile")
    source.add_argument("--kubeconfig", help=kubeconfig_help)


def fleet_source(args: argparse.Namespace) -> FleetSource:
    return FleetSource(paths=tuple(args.fleet), profile=args.profile, nodes=args.nodes, partitioning=args.partitioning, kubeconfig=args.kubeconfig)


def fleet_given(args: argparse.Namespace) -> bool:
    return bool(args.fleet or args.profile or args.kubeconfig)
