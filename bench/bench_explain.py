"""How long `dra-driver explain` takes for one claim on a fleet of about 10,000 devices.

Usage:
    python bench/bench_explain.py [--profile dgx-a100-mig] [--nodes 49] [--partitioning dynamic] [--repeat 3]
    python bench/bench_explain.py --write DIR   # then: time dra-driver explain DIR/claim.json --fleet DIR/fleet.json

Builds the simulated fleet once (not timed as part of explain), writes it to a
temporary List file, then times each phase: reading and validating the fleet
file, grouping pools, the allocation with explanations (selectors on every
device of every node), and the text report. It prints one line per phase
(median of --repeat, wall and CPU time) and the number of real CEL evaluations the memo left.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from dra_driver.sources import fleet as fleets
from dra_driver.ingest import limits
from dra_driver.allocator import Allocator, CelMatcher, DeviceClassSpec, build_pools
from dra_driver.allocator.report import to_text
from dra_driver.model.resource_v1 import ResourceClaim
from dra_driver.sources.claims import to_claim
from dra_driver.sources.fleet_source import fleet_nodes
from timing import timed

NV = "gpu.nvidia.com"
CLASSES = {
    "gpu.nvidia.com": DeviceClassSpec("gpu.nvidia.com", (f'device.driver == "{NV}" && device.attributes["{NV}"].type == "gpu"',)),
    "mig.nvidia.com": DeviceClassSpec("mig.nvidia.com", (f'device.driver == "{NV}" && device.attributes["{NV}"].type == "mig"',)),
}
CLAIM = {
    "metadata": {"name": "bench", "namespace": "default"},
    "spec": {
        "devices": {
            "requests": [
                {
                    "name": "accel",
                    "firstAvailable": [
                        {"name": "whole", "deviceClassName": "gpu.nvidia.com", "count": 9},
                        {
                            "name": "slice",
                            "deviceClassName": "mig.nvidia.com",
                            "count": 2,
                            "selectors": [
                                {
                                    "cel": {
                                        "expression": f'device.attributes["{NV}"].profile == "3g.20gb" '
                                        f'&& device.capacity["{NV}"].memory.compareTo(quantity("10Gi")) >= 0'
                                    }
                                }
                            ],
                        },
                    ],
                }
            ],
            "constraints": [{"requests": ["accel/slice"], "matchAttribute": f"{NV}/parentUUID"}],
        }
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="dgx-a100-mig")
    parser.add_argument("--nodes", type=int, default=49)
    parser.add_argument("--partitioning", default="dynamic", choices=("static", "dynamic"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write", metavar="DIR", help="only write DIR/fleet.json and DIR/claim.json, for timing the real CLI end to end")
    args = parser.parse_args()
    # A 40,000-device fleet file is ~60 MB: above the default input limits (docs/performance.md).
    limits.configure(limits.Limits(max_bytes=1 << 30, max_nodes=50_000_000, bytes_chosen=True, nodes_chosen=True))

    fleet = fleets.simulated(args.profile, args.nodes, args.partitioning)
    devices = sum(len(s["spec"].get("devices") or []) for s in fleet.slices)
    print(f"fleet: {args.profile} x {args.nodes} nodes ({args.partitioning}): {devices} devices in {len(fleet.slices)} slices")
    if args.write:
        out = Path(args.write)
        out.mkdir(parents=True, exist_ok=True)
        (out / "fleet.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": fleet.slices}))
        (out / "claim.json").write_text(json.dumps({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", **CLAIM}))
        print(f"wrote {out / 'fleet.json'} and {out / 'claim.json'}; time: dra-driver explain {out / 'claim.json'} --fleet {out / 'fleet.json'}")
        return
    claim = to_claim(ResourceClaim.model_validate(CLAIM).spec, "bench", "default")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fleet.json"
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": fleet.slices}))
        timed("read fleet file (JSON List)", args.repeat, lambda: fleets.load_paths([path]))
        timed("validate slices (API limits)", 1, lambda: fleets.check_slices(fleet.slices))

    pools, t_pools = timed("group pools", args.repeat, lambda: build_pools(fleet.slices))
    nodes = fleet_nodes(pools, [])

    def run() -> tuple:  # fresh matcher each time: no memo carried between repeats
        matcher = CelMatcher()
        return Allocator(pools, CLASSES, matcher).explain([claim], nodes), matcher

    (explanation, matcher), t_explain = timed("allocate + explain (fresh CEL memo)", args.repeat, run)
    _, t_text = timed("text report", args.repeat, lambda: to_text(explanation, "fleet"))
    chosen = explanation.chosen
    print(f"result: {'allocatable on ' + chosen.node if chosen else 'not allocatable'}; CEL evaluations: {matcher.evaluations} for {devices} devices")
    print(f"explain total (pools + allocate + report): {(t_pools + t_explain + t_text) * 1000:.1f} ms cpu")


if __name__ == "__main__":
    main()
