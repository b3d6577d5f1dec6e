"""Container edits for NVIDIA devices: device nodes, MIG capability nodes, environment.

The CDI spec built from these gives a container exactly the allocated GPUs:
/dev/nvidia<minor> per GPU, the shared control nodes and the MIG access
capabilities for MIG devices. Which GPUs a container sees is decided by the
device nodes alone, because they come with the CDI IDs of the requests the
container names: a container naming two requests of a claim gets both sets.
An env list cannot do that: CDI applies env edits in order and the last value
of a name wins, so a per-request NVIDIA_VISIBLE_DEVICES would show only the
last request's GPUs. The claim sets NVIDIA_VISIBLE_DEVICES=void instead, as
NVIDIA's DRA driver does: on a node whose runtime is nvidia-container-runtime
in legacy mode, the runtime then injects nothing on its own, even for images
that set NVIDIA_VISIBLE_DEVICES=all. Each device carries its UUID in its own
variable (NVIDIA_DRA_UUID_<DEVICE>), which cannot collide.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence
from pathlib import Path

from dra_driver.common import node_file
from dra_driver.common.logs import fields
from dra_driver.backend.interface import ContainerEdits, DeviceNode, env_name_part
from dra_driver_nvidia.config import TIMESLICE_VALUES, GpuConfig, MigDeviceConfig

log = logging.getLogger(__name__)

CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
MIG_MINORS_FILE = Path("driver/nvidia-caps/mig-minors")
_MAX_MIG_MINORS_BYTES = 1 << 20  # about 9 lines per GPU instance, 15 instances per GPU
# Layout of the nvidia-caps minors the kernel driver assigns (what mig-minors lists):
# config=1, monitor=2, then per GPU 15 GIs x (1 GI access + 8 CI access) minors.
_CAPS_PER_GI = 9
_GIS_PER_GPU = 15
_MIG_LINE = re.compile(r"^gpu(\d+)/gi(\d+)(?:/ci(\d+))?/access\s+(\d+)\Z")


def _node(path: str, dev_root: Path) -> DeviceNode:
    host = _host_path(path, dev_root)
    return DeviceNode(path=path, host_path=None if host == path else host)


@functools.lru_cache(maxsize=4096)
def _host_path(path: str, dev_root: Path) -> str:
    # Cached: every prepare asks for the same few nodes, and pathlib joins dominate edit building.
    return str(dev_root / path.removeprefix("/dev/"))


def gpu_edits(minor: int, dev_root: Path) -> ContainerEdits:
    return ContainerEdits(device_nodes=[_node(f"/dev/nvidia{minor}", dev_root), *(_node(p, dev_root) for p in CONTROL_NODES)])


class MigMinors:
    """nvidia-caps minor numbers of MIG access capabilities, from /proc or the driver's fixed layout."""

    def __init__(self, proc_root: Path | None) -> None:
        self._table: dict[tuple[int, int, int | None], int] = {}
        path = proc_root / MIG_MINORS_FILE if proc_root is not None else None
        if path is not None and path.is_file():
            for line in node_file.read_regular(path, _MAX_MIG_MINORS_BYTES, follow_symlinks=True).decode(errors="replace").splitlines():
                match = _MIG_LINE.match(line.strip())
                if match:
                    gpu, gi, ci, minor = match.groups()
                    self._table[(int(gpu), int(gi), int(ci) if ci is not None else None)] = int(minor)
        elif path is not None:
            log.debug("no mig-minors file; using the driver's fixed minor layout", extra=fields(path=str(path)))

    def minor(self, gpu_minor: int, gi_id: int, ci_id: int | None = None) -> int:
        key = (gpu_minor, gi_id, ci_id)
        if key in self._table:
            return self._table[key]
        base = 3 + gpu_minor * _GIS_PER_GPU * _CAPS_PER_GI + gi_id * _CAPS_PER_GI
        return base if ci_id is None else base + 1 + ci_id


def mig_edits(parent_minor: int, gi_id: int, ci_id: int, dev_root: Path, minors: MigMinors) -> ContainerEdits:
    edits = gpu_edits(parent_minor, dev_root)
    for cap in (minors.minor(parent_minor, gi_id), minors.minor(parent_minor, gi_id, ci_id)):
        edits.device_nodes.append(_node(f"/dev/nvidia-caps/nvidia-cap{cap}", dev_root))
    return edits


# Claim-level: turns off nvidia-container-runtime's own injection (legacy mode), whatever the image sets.
VISIBLE_DEVICES_VOID = "NVIDIA_VISIBLE_DEVICES=void"


def uuid_env(device: str, uuid: str) -> str:
    """The device's UUID in a variable of its own: per-device values never overwrite each other."""
    return f"NVIDIA_DRA_UUID_{env_name_part(device)}={uuid}"


def sharing_env(configs: Sequence[GpuConfig | MigDeviceConfig | None]) -> list[str]:
    """Environment naming the request's sharing settings, for the workload to read.

    What sharing does is applied on the node (dra_driver_nvidia.sharing): the MPS client variables
    and the pipe directory come with the claim's MPS control daemon, the interval is set on the GPU.
    """
    env: list[str] = []
    for config in configs:
        sharing = config.sharing if config is not None else None
        if sharing is None:
            continue
        env.append(f"NVIDIA_DRA_SHARING_STRATEGY={sharing.strategy}")
        if sharing.strategy == "TimeSlicing":
            interval = sharing.timeSlicingConfig.interval if sharing.timeSlicingConfig else "Default"
            env.append(f"NVIDIA_DRA_TIMESLICE_INTERVAL={TIMESLICE_VALUES[interval]}")
    return list(dict.fromkeys(env))
