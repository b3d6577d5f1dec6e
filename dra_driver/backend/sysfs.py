"""PCI facts read from a sysfs tree under a configurable root, shared by the vendor backends.

Real sysfs files end in a newline; simulated trees may write none, so every read
strips surrounding whitespace. The root is a parameter so tests and profiles can
point it at a temporary tree.
"""

from __future__ import annotations

import re
from pathlib import Path

from dra_driver.common import node_file

# A lower-case PCI address as the kernel names devices: 0000:19:00.0.
BDF_PATTERN = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
# A host bridge (root complex) directory: pci<domain>:<bus>, e.g. pci0000:17.
PCIE_ROOT_PATTERN = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}\Z")
_MAX_ATTRIBUTE_BYTES = 64 * 1024  # a sysfs attribute is at most a page


def pci_device_dir(sysfs_root: Path, bdf: str) -> Path:
    """<root>/bus/pci/devices/<bdf>: a symlink into the device's place under devices/."""
    return sysfs_root / "bus" / "pci" / "devices" / bdf


def pcie_root(device_dir: Path) -> str | None:
    """The `pci<domain>:<bus>` component of the device's resolved path, as Kubernetes'
    deviceattribute helper finds it; None when the path does not resolve or has none."""
    try:
        resolved = device_dir.resolve(strict=True)
    except OSError:
        return None
    for part in resolved.parts:
        if PCIE_ROOT_PATTERN.match(part):
            return part
    return None


def numa_node(device_dir: Path) -> int | None:
    """The device's NUMA node from `<device>/numa_node`; None when unreadable or -1 (no NUMA affinity)."""
    value = read_int(device_dir / "numa_node")
    return value if value is not None and value >= 0 else None


def read_text(path: Path) -> str | None:
    """The file's content without surrounding whitespace, or None when it cannot be read."""
    try:  # sysfs links are followed (device directories are links); a pipe or device planted in a tree is not read
        return node_file.read_regular(path, _MAX_ATTRIBUTE_BYTES, follow_symlinks=True).decode(errors="replace").strip()
    except OSError:
        return None


def read_int(path: Path) -> int | None:
    """A decimal sysfs value ("5" or "5\\n"), or None when absent or not a number."""
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text, 10)
    except ValueError:
        return None
