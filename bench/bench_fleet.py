"""How long `dra-driver fleet` takes on a big fleet file: 5,000 nodes x 8 GPUs, a third of them held.

Usage:
    python bench/bench_fleet.py [--profile dgx-h100] [--nodes 5000] [--held 0.33] [--repeat 3]
    python bench/bench_fleet.py --write DIR
    time dra-driver --max-input-size 128Mi --max-input-nodes 8000000 fleet --fleet DIR/fleet.json
    (the 50 MB file is past the input layer's default limits, so the run raises them as a user would)

Builds the simulated fleet once, adds one ResourceClaim per held node (allocated to the
first `held` share of its devices, reserved for one Pod) and the Pods, writes it as one
JSON List, then times each phase in process (median wall and CPU time of --repeat): reading the file,
validating the slices, building the view (pools, states, counters, holders), and the
table, the JSON and the class-filtered view. End to end, the CLI adds Python start-up.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from dra_driver.sources import fleet as fleets
from dra_driver import ingest
from dra_driver.allocator import CelMatcher
from dra_driver.sources.classes import SHIPPED, ClassLayer, merge_classes, shipped_class_documents
from dra_driver.fleet import Filters, build_view
from dra_driver.fleet.render import to_data, to_table
from timing import timed

def claims_and_pods(slices: list[dict[str, Any]], share: float) -> list[dict[str, Any]]:
    """One claim per node holding its first `share` of devices, each reserved for one pod (and the pod)."""
    docs: list[dict[str, Any]] = []
    for obj in slices:
        spec = obj["spec"]
        devices = spec.get("devices") or []
        held = devices[: int(len(devices) * share)]
        if not held:
            continue
        node = spec["nodeName"]
        results = [{"request": "gpus", "driver": spec["driver"], "pool": spec["pool"]["name"], "device": d["name"]} for d in held]
        meta = {"name": f"train-{node}", "namespace": "team-a"}
        status = {"allocation": {"devices": {"results": results}}, "reservedFor": [{"resource": "pods", "name": f"trainer-{node}", "uid": node}]}
        docs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta, "status": status})
        docs.append(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"trainer-{node}", "namespace": "team-a"}, "status": {"phase": "Running"}}
        )
    return docs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="dgx-h100")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--partitioning", default="static", choices=("static", "dynamic"))
    parser.add_argument("--held", type=float, default=0.33, help="share of each node's devices held by a claim")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write", metavar="DIR", help="only write DIR/fleet.json, for timing the real CLI end to end")
    args = parser.parse_args()
    ingest.configure(ingest.Limits(max_bytes=128 << 20, max_nodes=8_000_000, bytes_chosen=True, nodes_chosen=True))

    fleet = fleets.simulated(args.profile, args.nodes, args.partitioning)
    items = fleet.slices + claims_and_pods(fleet.slices, args.held)
    devices = sum(len(s["spec"].get("devices") or []) for s in fleet.slices)
    print(f"fleet: {args.profile} x {args.nodes} nodes ({args.partitioning}): {devices} devices, {len(items) - len(fleet.slices)} claims and pods")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.write or tmp) / "fleet.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        if args.write:
            print(f"wrote {path} ({path.stat().st_size / 1e6:.0f} MB); time: dra-driver fleet --fleet {path}")
            return
        loaded, _ = timed("read fleet file (JSON List)", args.repeat, lambda: fleets.load_paths([path]))
    timed("validate slices (API limits)", args.repeat, lambda: fleets.check_slices(loaded.slices))
    view, _ = timed("build view (pools, states, counters, holders)", args.repeat, lambda: build_view(loaded, Filters()))
    timed("table", args.repeat, lambda: to_table(view))
    timed("JSON", args.repeat, lambda: json.dumps(to_data(view)))

    def by_class() -> Any:
        matcher = CelMatcher()
        classes = merge_classes([ClassLayer(SHIPPED, shipped_class_documents())], matcher)
        return build_view(loaded, Filters(device_class=classes["gpu.nvidia.com"]), matcher)

    timed("build view with CLASS gpu.nvidia.com (CEL)", args.repeat, by_class)
    counts = {state: sum(g.counts[state] for g in view.groups) for state in ("allocated", "free")}
    print(f"view: {len(view.devices)} devices on {view.nodes} nodes, {counts['allocated']} allocated, {counts['free']} free")


if __name__ == "__main__":
    main()
