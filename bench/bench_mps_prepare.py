"""What sharing adds to the NVIDIA backend's prepare and unprepare: a whole GPU without sharing, with a time-slice
interval (one nvidia-smi run each way), with MPS (the control daemon started, its limits sent, stopped at unprepare).

The backend runs over the simulated NVML and driver root, so the processes are the stand-ins
(vendors/nvidia/simulated/mps_control_standin.py is a Python program, nvidia-smi a shell script): most of the MPS figure is
the interpreter starting once per `nvidia-cuda-mps-control` run (the start, and one run per limit command). The real
binary is a small C program; measure it on a GPU host with the same command and a real driver root
(docs/hardware-validation.md).

usage: python bench/bench_mps_prepare.py [--repeat R] [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.backend.interface import AllocatedDevice, BackendSettings, ClaimRef
from dra_driver_nvidia.backend import NvidiaBackend
from dra_driver_nvidia.config import validate_config

API = "resource.nvidia.com/v1beta1"
CASES: dict[str, dict[str, Any] | None] = {
    "no sharing": None,
    "time slice Long": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
    "MPS, no limits": {"strategy": "MPS"},
    "MPS, thread % + pinned memory": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50,
                                                                       "defaultPinnedDeviceMemoryLimit": "20Gi"}},
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--state-dir", type=Path, default=None, help="default: a temp dir (use a tmpfs, as /var/run is)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-mps-") as scratch:
        state = args.state_dir or Path(scratch)
        settings = BackendSettings(node_name="node-a", state_dir=state)
        backend = NvidiaBackend.from_profile(load_profile("dgx-h100").sections["nvidia"], settings)
        try:
            backend.discover()
            for label, sharing in CASES.items():
                config = validate_config({"apiVersion": API, "kind": "GpuConfig", "sharing": sharing}) if sharing else None
                devices = [AllocatedDevice(request="gpu", pool="node-a", device="gpu-0", config=config)]
                claim = ClaimRef("bench", "c", "uid-bench")
                prepares, unprepares = [], []
                for _ in range(args.repeat):  # each prepare is followed by its unprepare
                    start = time.perf_counter()
                    state = backend.prepare(claim, devices).state
                    middle = time.perf_counter()
                    backend.unprepare(claim, state)
                    prepares.append(middle - start)
                    unprepares.append(time.perf_counter() - middle)
                print(f"{label:<32} prepare p50 {statistics.median(prepares) * 1000:7.1f} ms   "
                      f"unprepare p50 {statistics.median(unprepares) * 1000:7.1f} ms")
        finally:
            backend.close()


if __name__ == "__main__":
    main()
