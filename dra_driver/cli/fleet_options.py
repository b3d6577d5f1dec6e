"""The fleet-source arguments explain, template and fleet share: --fleet | --profile [--nodes --partitioning] | --kubeconfig/--context.

With none of them, the cluster kubectl would use is read ($KUBECONFIG, ~/.kube/config, in-cluster).
"""

from __future__ import annotations

import argparse

from dra_driver.sources.fleet_source import FleetSource
from dra_driver.kube.api_source import find_api_source


def add_fleet_source(parser: argparse.ArgumentParser, title: str, files_help: str, kubeconfig_help: str) -> None:
    source = parser.add_argument_group(title + "; none: the cluster of $KUBECONFIG or ~/.kube/config, as kubectl")
    source.add_argument("--fleet", action="append", default=[], metavar="DIR|FILE", help=files_help)
    source.add_argument("--profile", help="simulate a hardware profile on --nodes identical nodes (dra-driver profiles lists them)")
    source.add_argument("--nodes", type=int, default=1, help="number of simulated nodes for --profile (default 1)")
    source.add_argument("--partitioning", choices=("static", "dynamic"), default="static", help="MIG/partition publishing mode for --profile")
    source.add_argument(
        "--consumable-gpu-memory",
        action="store_true",
        help="the --profile nodes run `dra-driver run --consumable-gpu-memory`: whole NVIDIA GPUs that claims asking a memory share "
            "(capacity.requests, template --share-memory) can share; pair with --feature-gates DRAConsumableCapacity=true",
    )
    source.add_argument("--kubeconfig", help=kubeconfig_help + " (default: $KUBECONFIG, then ~/.kube/config)")
    source.add_argument("--context", help="the kubeconfig context to use (default: its current-context)")


def fleet_source(args: argparse.Namespace) -> FleetSource:
    return FleetSource(
        paths=tuple(args.fleet),
        profile=args.profile,
        nodes=args.nodes,
        partitioning=args.partitioning,
        kubeconfig=args.kubeconfig,
        context=args.context,
        consumable_gpu_memory=args.consumable_gpu_memory,
    )


def fleet_given(args: argparse.Namespace) -> bool:
    """A fleet was named on the command line (not found as kubectl's default cluster)."""
    return bool(args.fleet or args.profile or args.kubeconfig or args.context)


def default_cluster() -> bool:
    """kubectl would find a cluster ($KUBECONFIG, ~/.kube/config, in-cluster)."""
    return find_api_source() is not None
