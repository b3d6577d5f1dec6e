"""Prepare one claim per device on this host's real hardware and check the CDI spec against the host.

Read-only towards the GPU: the daemon runs with static partitioning (no MIG change), against the
simulated API server, with kubelet, CDI and state directories in a temporary folder. For each
published device one claim is prepared; its spec is copied to --out, every device node and mount
host path it names is checked to exist on this host, and the claim is unprepared again (the spec
must be gone afterwards).

Usage: python3 scripts/host_prepare_check.py --out DIR      (exit 0: every check passed)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import bench_prepare as bench  # noqa: E402

from dra_driver.simulation import api_server as sim_apiserver  # noqa: E402


def missing_host_paths(spec: dict[str, Any]) -> list[str]:
    """Host paths a runtime would need that are not on this host."""
    edits = [spec.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in spec.get("devices") or []]
    paths = [n.get("hostPath") or n["path"] for e in edits for n in e.get("deviceNodes") or []]
    paths += [m["hostPath"] for e in edits for m in e.get("mounts") or []]
    return [p for p in paths if not Path(p).exists()]


def check_device(server: sim_apiserver.SimApiServer, target: bench.Target, cdi_dir: Path, device: str, out: Path) -> list[str]:
    ref = bench.make_claim(server, target, f"check-{device}", [device])
    problems: list[str] = []
    response = target.conn.prepare([ref])
    error = bench.claim_error(response, ref)
    if error:
        return [f"{device}: prepare failed: {error}"]
    specs = sorted(cdi_dir.glob(f"*{ref.uid}*.json"))
    if not specs:
        problems.append(f"{device}: no CDI spec for claim {ref.uid} in {cdi_dir}")
    for spec_path in specs:
        shutil.copy(spec_path, out / f"spec-{device}.json")
        spec = json.loads(spec_path.read_text())
        problems += [f"{device}: {spec_path.name} names {p}, not on this host" for p in missing_host_paths(spec)]
        print(f"{device}: {spec_path.name}: cdiDevices {[d['name'] for d in spec.get('devices') or []]}")
    print(f"{device}: CDI ids {list(response.claims[ref.uid].devices[0].cdi_device_ids) if response.claims[ref.uid].devices else []}")
    unprepared = target.conn.unprepare([ref])
    if bench.claim_error(unprepared, ref):
        problems.append(f"{device}: unprepare failed: {bench.claim_error(unprepared, ref)}")
    problems += [f"{device}: {p.name} left after unprepare" for p in specs if p.exists()]
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the specs and the published slices")
    parser.add_argument("--profile", default=bench.HOST, help="a simulated profile instead of the host (to try the check itself)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="dra-host-check-"))
    run_args = argparse.Namespace(partitioning="static", claim_cache=False)
    server = sim_apiserver.SimApiServer().start()
    daemon = bench.start_daemon(run_args, 0, args.profile, server, work, work, None)
    problems: list[str] = []
    try:
        for driver in bench.serving_drivers(daemon, None):
            target = bench.connect_target(server, daemon, driver, "static", None)
            slices = server.objects("ResourceSlice", spec__nodeName=daemon.node, spec__driver=driver)
            (args.out / f"slices-{driver}.json").write_text(json.dumps(slices, indent=1))
            for device in target.devices:
                problems += check_device(server, target, work / "cdi-0", device, args.out)
            target.conn.close()
    finally:
        daemon.process.terminate()
        daemon.process.wait(15)
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    for problem in problems:
        print(f"FAIL {problem}")
    print("host prepare check:", "passed" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
