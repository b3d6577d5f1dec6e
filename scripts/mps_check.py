"""MPS on a real GPU through the NVIDIA backend, leaving the GPU's compute mode alone.

Prepares a claim of gpu-0 with `sharing.strategy: MPS` (50% of the threads, a pinned-memory limit),
asks the real control daemon what it was told, runs CUDA clients in the claim's MPS namespace (one
allocation under the limit, one over it), unprepares, and checks the daemon is gone. With
`--mps-compute-mode unchanged` semantics (BackendSettings.mps_exclusive_compute=False) nothing on
the GPU changes; the MPS server the first client starts ends with the control daemon.

Usage: python3 scripts/mps_check.py [--limit 8Gi] [--repeat 3]   (needs root: the daemon runs in a
mount namespace of its own with the claim's shm directory at /dev/shm)
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dra_driver.model import quantity
from dra_driver.backend.interface import AllocatedDevice, BackendSettings, ClaimRef
from dra_driver_nvidia.backend import NvidiaBackend
from dra_driver_nvidia.config import NvidiaConfig, validate_config

CLIENT = """
import sys, torch
size = int(sys.argv[1])
try:
    block = torch.empty(size, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    print(f"allocated {size / 2**30:.1f} GiB: ok")
except RuntimeError as exc:
    print(f"allocated {size / 2**30:.1f} GiB: refused ({str(exc).splitlines()[0][:120]})")
"""


def mps_config(limit: str) -> NvidiaConfig:
    return validate_config({
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": limit}},
    })  # fmt: skip


def query(pipe: str, command: str) -> str:
    done = subprocess.run(["nvidia-cuda-mps-control"], input=command + "\n", text=True, capture_output=True,
                          env={"CUDA_MPS_PIPE_DIRECTORY": pipe, "PATH": "/usr/local/nvidia/bin:/usr/bin:/bin"}, timeout=30)  # fmt: skip
    return f"{command!r} -> rc {done.returncode}, {done.stdout.strip()!r}{' stderr ' + repr(done.stderr.strip()) if done.stderr.strip() else ''}"


def client(pipe: str, shm: str, size: int) -> str:
    """A CUDA program as the container would run it: the claim's pipe directory, its shm at /dev/shm."""
    script = 'mount --bind "$0" /dev/shm && CUDA_MPS_PIPE_DIRECTORY="$1" exec python3 -c "$2" "$3"'
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, shm, pipe, CLIENT, str(size)],
                          text=True, capture_output=True, timeout=300)  # fmt: skip
    return (done.stdout.strip() or done.stderr.strip()[-300:]) + f" (rc {done.returncode})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", default="8Gi", help="the pinned device memory limit (a Kubernetes quantity, default 8Gi)")
    parser.add_argument("--repeat", type=int, default=3, help="prepare/unprepare rounds timed (MPS start-up with the real binary)")
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="mps-check-"))
    backend = NvidiaBackend.from_host(BackendSettings(node_name="n", state_dir=state, mps_exclusive_compute=False))
    backend.discover()
    claim = ClaimRef("ns", "mps-check", "mps-check-uid")
    device = [AllocatedDevice(request="gpu", pool="n", device="gpu-0", config=mps_config(args.limit))]
    limit_bytes = int(quantity.parse(args.limit))
    try:
        started = time.perf_counter()
        prepared = backend.prepare(claim, device)
        print(f"prepare with MPS: {(time.perf_counter() - started) * 1000:.0f} ms")
        mounts = {m.container_path: m.host_path for m in prepared.claim_edits.mounts}
        pipe, shm = mounts["/tmp/nvidia-mps"], mounts["/dev/shm"]
        print("env:", [e for e in prepared.claim_edits.env if "MPS" in e or "CUDA" in e])
        for record in sorted((state / "nvidia" / "sharing").glob("*.json")):
            print("record:", json.dumps(json.loads(record.read_text()))[:600])
        uuid = backend._index().gpus["gpu-0"].uuid
        for command in ("get_default_active_thread_percentage", f"get_default_device_pinned_mem_limit {uuid}",
                        "get_default_device_pinned_mem_limit 0", "get_server_list"):  # fmt: skip
            print(query(pipe, command))
        print("client under the limit:", client(pipe, shm, limit_bytes - 2 * 2**30))
        print("client over the limit:", client(pipe, shm, limit_bytes + 4 * 2**30))
        print(query(pipe, "get_server_list"))
        log_dir = Path(pipe).parent / "log"
        print("control.log (tail):", *(log_dir / "control.log").read_text().splitlines()[-12:], sep="\n  ")
        started = time.perf_counter()
        backend.unprepare(claim, prepared.state)
        print(f"unprepare with MPS: {(time.perf_counter() - started) * 1000:.0f} ms")
        left = subprocess.run(["pgrep", "-af", "nvidia-cuda-mps"], capture_output=True, text=True).stdout.strip()
        print("MPS processes left:", left or "none")
        for round_ in range(args.repeat):
            started = time.perf_counter()
            again = backend.prepare(ClaimRef("ns", f"r{round_}", f"round-{round_}"), device)
            middle = time.perf_counter()
            backend.unprepare(ClaimRef("ns", f"r{round_}", f"round-{round_}"), again.state)
            print(f"round {round_}: prepare {(middle - started) * 1000:.0f} ms, unprepare {(time.perf_counter() - middle) * 1000:.0f} ms")
    finally:
        backend.close()
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
