"""Where a tool's fleet comes from (exactly one of files, a simulated profile, a cluster) and its nodes: what explain,
template and fleet read with --fleet / --profile / --kubeconfig / --context."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dra_driver.sources import fleet as fleets
from dra_driver.allocator import Node, node_names
from dra_driver.allocator.types import Pool
from dra_driver.common.errors import FieldError
from dra_driver.ingest.errors import InputError
from dra_driver.kube.api_source import ApiSource, api_source, find_api_source, searched


@dataclass(frozen=True)
class FleetSource:
    """The --fleet / --profile / --kubeconfig and --context choice; at most one kind may be set, none reads the
    cluster kubectl would ($KUBECONFIG, ~/.kube/config, in-cluster)."""

    def cluster(self) -> ApiSource | None:
        """The cluster this source reads (KubeConfigError for a bad --kubeconfig/--context), None for files or a profile."""
        if self.kubeconfig or self.context:
            return api_source(kubeconfig=self.kubeconfig, context=self.context)
        return None if self.paths or self.profile else find_api_source()


    paths: Sequence[str] = ()
    profile: str | None = None
    nodes: int = 1
    partitioning: str = "static"
    kubeconfig: str | None = None
    context: str | None = None  # a context of the kubeconfig (--context); with nothing else set, the kubectl default is read
    with_pods: bool = False  # also LIST Pods from the cluster (`dra-driver fleet` shows who holds a claim)
    consumable_gpu_memory: bool = False  # the simulated nodes run `run --consumable-gpu-memory` (--profile only)


def load_fleet(source: FleetSource) -> fleets.Fleet:
    chosen = [
        flag
        for flag, on in (
            ("--fleet", bool(source.paths)),
            ("--profile", bool(source.profile)),
            ("--kubeconfig/--context", bool(source.kubeconfig or source.context)),
        )
        if on
    ]
    if len(chosen) > 1:
        raise InputError([FieldError("arguments", f"give one of --fleet, --profile, --kubeconfig/--context (got {', '.join(chosen)})")])
    if source.consumable_gpu_memory and not source.profile:
        raise InputError(
            [
                FieldError(
                    "--consumable-gpu-memory",
                    "simulates a node setting: give it with --profile (slices from files or a cluster show allowMultipleAllocations as published)",
                )
            ]
        )
    cluster = source.cluster()
    if not chosen and cluster is None:
        raise InputError(
            [
                FieldError(
                    "arguments",
                    f"no fleet: pass --fleet FILE, --profile NAME, or --kubeconfig FILE [--context NAME] (no cluster configured: {searched()})",
                )
            ]
        )
    if source.profile:
        # Rendered by our own layout code, which keeps the API limits; checking
        # 10,000 generated devices again would cost seconds.
        return fleets.simulated(source.profile, source.nodes, source.partitioning, consumable_gpu_memory=source.consumable_gpu_memory)
    fleet = fleets.from_cluster(cluster, with_pods=source.with_pods) if cluster is not None else fleets.load_paths(source.paths)
    fleets.check_slices(fleet.slices)
    return fleet


def fleet_nodes(pools: Sequence[Pool], known: Sequence[Node]) -> list[Node]:
    """Every node a pool names or the cluster lists; one anonymous node for a fleet of network-attached pools."""
    labels = {n.name: n.labels for n in known}
    names = sorted(set(node_names(pools)) | set(labels))
    if not names:
        return [Node("")]
    return [Node(name, labels.get(name) or {"kubernetes.io/hostname": name}) for name in names]
