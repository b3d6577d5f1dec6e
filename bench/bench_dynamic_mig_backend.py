"""NVIDIA dynamic-MIG backend prepare and unprepare in process, without the daemon: what the backend and its simulated
library cost, apart from gRPC, the claim GET, the CDI spec and the checkpoint (bench_prepare.py measures those).

One NvidiaBackend on a simulated dgx-h100 with --partitioning dynamic and its state dir on /dev/shm (the simulated
hardware's state file and the MIG ownership journal there, as under a node's tmpfs --state-dir). --held 1g.10gb
instances are prepared first and kept (spread over the GPUs, seven a GPU, as in bench_prepare.py's rounds of 56
claims), then one 1g.10gb device on GPU 0 is prepared and unprepared --claims times; medians in ms.

usage: python bench/bench_dynamic_mig_backend.py [--claims N] [--held H]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.backend.interface import AllocatedDevice, BackendSettings, ClaimRef
from dra_driver_nvidia.backend import NvidiaBackend

PER_GPU = 7  # 1g.10gb placements on an H100
GPUS = 8


def allocation(device: str) -> list[AllocatedDevice]:
    return [AllocatedDevice(request="gpu", pool="bench", device=device)]


def claim(name: str) -> ClaimRef:
    return ClaimRef("bench", name, name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=400, help="prepare/unprepare cycles measured (default 400)")
    parser.add_argument("--held", type=int, default=55, help=f"other 1g.10gb instances kept live (0-{PER_GPU * GPUS - 1}, default 55)")
    args = parser.parse_args()
    if not 0 <= args.held < PER_GPU * GPUS:
        parser.error(f"--held must be 0-{PER_GPU * GPUS - 1}")
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as state_dir:
        settings = BackendSettings(node_name="bench", partitioning="dynamic", state_dir=Path(state_dir))
        backend = NvidiaBackend.from_profile(dict(load_profile("dgx-h100").sections["nvidia"]), settings)
        try:
            backend.discover()
            slots = [(gpu, start) for gpu in range(GPUS) for start in range(PER_GPU) if (gpu, start) != (0, 0)]
            for gpu, start in slots[: args.held]:
                backend.prepare(claim(f"held-{gpu}-{start}"), allocation(f"gpu-{gpu}-mig-1g10gb-19-{start}"))
            prepares, unprepares = [], []
            for number in range(args.claims):
                ref = claim(f"c{number}")
                started = time.perf_counter()
                state = backend.prepare(ref, allocation("gpu-0-mig-1g10gb-19-0")).state
                prepared = time.perf_counter()
                backend.unprepare(ref, state)
                prepares.append(prepared - started)
                unprepares.append(time.perf_counter() - prepared)
        finally:
            backend.close()
    print(f"held {args.held}, {args.claims} claims: backend prepare p50 {statistics.median(prepares) * 1000:.3f} ms, "
          f"unprepare p50 {statistics.median(unprepares) * 1000:.3f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
