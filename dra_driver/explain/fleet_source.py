"""Where explain's fleet comes from (exactly one of files, a simulated profile, a cluster) and its nodes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dra_driver import fleet as fleets
from dra_driver.allocator import Node, node_names
from dra_driver.allocator.types import Pool
from dra_driver.errors import FieldError
from dra_driver.explain.errors import InputError


@dataclass(frozen=True)
class FleetSource:
    """The --fleet / --profile / --kubeconfig choice; exactly one kind may be set."""

    paths: Sequence[str] = ()
    profile: str | None = None
    nodes: int = 1
    partitioning: str = "static"
    kubeconfig: str | None = None
    with_pods: bool = False  # also LIST Pods from the cluster (`dra-driver fleet` shows who holds a claim)


def load_fleet(source: FleetSource) -> fleets.Fleet:
    chosen = [flag for flag, on in (("--fleet", bool(source.paths)), ("--profile", bool(source.profile)), ("--kubeconfig", bool(source.kubeconfig))) if on]
    if len(chosen) != 1:
        raise InputError([FieldError("arguments", f"give exactly one of --fleet, --profile, --kubeconfig (got {', '.join(chosen) or 'none'})")])
    if source.profile:
        # Rendered by our own layout code, which keeps the API limits; checking
        # 10,000 generated devices again would cost seconds.
        return fleets.simulated(source.profile, source.nodes, source.partitioning)
    fleet = fleets.load_paths(source.paths) if source.paths else fleets.from_cluster(str(source.kubeconfig), with_pods=source.with_pods)
    fleets.check_slices(fleet.slices)
    return fleet


def fleet_nodes(pools: Sequence[Pool], known: Sequence[Node]) -> list[Node]:
    """Every node a pool names or the cluster lists; one anonymous node for a fleet of network-attached pools."""
    labels = {n.name: n.labels for n in known}
    names = sorted(set(node_names(pools)) | set(labels))
    if not names:
        return [Node("")]
    return [Node(name, labels.get(name) or {"kubernetes.io/hostname": name}) for name in names]
