"""What the NVIDIA driver files cost a prepare: building and serializing one claim's CDI spec, with and without them.

Uses the simulated driver root a profile gets (9 libraries, 5 utilities, 2 firmware files, 2 sockets). Prints the
median over --repeat runs of --calls spec builds each, in microseconds per spec, and the spec size.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from dra_driver.node import cdi
from dra_driver.backend.interface import ContainerEdits
from dra_driver_nvidia import driver_files, edits
from dra_driver_nvidia.simulated import fake_driver_root

VERSION = "580.95.05"


def per_spec_us(devices: list[cdi.SpecDevice], claim: ContainerEdits, calls: int, repeat: int) -> tuple[float, int]:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            json.dumps(cdi.build_claim_spec("gpu.nvidia.com", devices, claim), separators=(",", ":"))
        runs.append((time.perf_counter() - start) / calls * 1e6)
    size = len(json.dumps(cdi.build_claim_spec("gpu.nvidia.com", devices, claim), separators=(",", ":")))
    return statistics.median(runs), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="dra-bench-cdi-"))
    try:
        files = driver_files.discover(fake_driver_root.build(scratch / "root", VERSION), VERSION)
        devices = [cdi.SpecDevice(name="uid-node-a-gpu-0", device="gpu-0", edits=edits.gpu_edits(0, Path("/dev")))]
        cases = {
            "device nodes only": ContainerEdits(),
            "driver files, no hook (soname mounts)": driver_files.claim_edits(files, None),
            "driver files, nvidia-cdi-hook": driver_files.claim_edits(files, "/usr/bin/nvidia-cdi-hook"),
        }
        for name, claim in cases.items():
            claim.env.insert(0, edits.VISIBLE_DEVICES_VOID)
            micros, size = per_spec_us(devices, claim, args.calls, args.repeat)
            print(f"{name:40s} {micros:7.1f} us/spec  {size:6d} bytes  {len(claim.mounts)} mounts, {len(claim.hooks)} hooks")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
