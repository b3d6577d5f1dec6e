"""What the sharing tests look at: the live control daemons (found by their environment, as `ps` would find
them), what a daemon answers, the simulated GPUs' compute modes and time-slice intervals."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from dra_driver.backend.interface import AllocatedDevice
from dra_driver_nvidia.simulated import fake_driver_root, mps_control_standin
from dra_driver_nvidia.backend import NvidiaBackend
from dra_driver_nvidia.config import validate_config

API = "resource.nvidia.com/v1beta1"


def gpu_config(**sharing: Any) -> Any:
    return validate_config({"apiVersion": API, "kind": "GpuConfig", "sharing": sharing})


def mps(**limits: Any) -> Any:
    return gpu_config(strategy="MPS", mpsConfig=limits) if limits else gpu_config(strategy="MPS")


def time_slice(interval: str) -> Any:
    return gpu_config(strategy="TimeSlicing", timeSlicingConfig={"interval": interval})


def alloc(*devices: str, config: Any = None, share_id: str | None = None) -> list[AllocatedDevice]:
    return [AllocatedDevice(request="gpu", pool="node-a", device=d, config=config, share_id=share_id) for d in devices]


def daemons_under(root: Path) -> dict[int, str]:
    """PID -> pipe directory of every live process whose CUDA_MPS_PIPE_DIRECTORY lies under `root`."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z":
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"CUDA_MPS_PIPE_DIRECTORY="):
                value = item.split(b"=", 1)[1].decode(errors="replace")
                if value.startswith(str(root)):
                    found[int(entry.name)] = value
    return found


def ask(backend: NvidiaBackend, pipe_dir: str, command: str) -> subprocess.CompletedProcess[str]:
    """`echo <command> | nvidia-cuda-mps-control` against one daemon, as an admin would type it."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CUDA_MPS_PIPE_DIRECTORY": pipe_dir}
    return subprocess.run([str(control_binary(backend))], input=command + "\n", env=env, capture_output=True, text=True, timeout=10, check=False)


def driver_root(backend: NvidiaBackend) -> Path:
    assert backend._scratch is not None
    return backend._scratch.path / "driver-root"


def control_binary(backend: NvidiaBackend) -> Path:
    return driver_root(backend) / "usr/bin/nvidia-cuda-mps-control"


def interval(backend: NvidiaBackend, gpu_uuid: str) -> int | None:
    """The interval the stand-in nvidia-smi last set on the GPU (None: never set)."""
    path = driver_root(backend) / fake_driver_root.TIMESLICE_DIR / gpu_uuid
    return int(path.read_text()) if path.exists() else None


def quirks(backend: NvidiaBackend, behaviour: dict[str, str]) -> Path:
    """Make daemons started from now on treat commands as another driver's binary would ("unknown" / "ignored")."""
    path = control_binary(backend).with_name(control_binary(backend).name + mps_control_standin.QUIRKS_SUFFIX)
    path.write_text("".join(f"{command} {how}\n" for command, how in behaviour.items()))
    return path
