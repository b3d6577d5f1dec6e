"""Container edits for an AMD GPU or partition: the device nodes ROCm needs.

Every container using an AMD GPU needs /dev/kfd (one per host, shared) and the
GPU's DRM nodes; a partition is reached through its own render and card
nodes. Major/minor numbers are left to the CDI runtime, which reads them from
the host node (kfd's major is assigned at load time).
"""

from __future__ import annotations

from pathlib import Path

from dra_driver.backend.interface import ContainerEdits, DeviceNode

_DEFAULT_DEV = Path("/dev")


def _node(dev_root: Path, relative: str) -> DeviceNode:
    return DeviceNode.under(f"/dev/{relative}", dev_root, permissions="rw")


def device_edits(card: int, render: int, dev_root: Path = _DEFAULT_DEV) -> ContainerEdits:
    return ContainerEdits(
        device_nodes=[
            _node(dev_root, "kfd"),
            _node(dev_root, f"dri/renderD{render}"),
            _node(dev_root, f"dri/card{card}"),
        ]
    )
