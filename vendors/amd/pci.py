"""The PCIe root of a GPU, read from sysfs like k8s.io/dynamic-resource-allocation/deviceattribute.

/sys/bus/pci/devices/<BDF> is a symlink into /sys/devices/pci<domain>:<bus>/...;
the `pci<domain>:<bus>` component names the host bridge (root complex).
"""

from __future__ import annotations

import re
from pathlib import Path

_ROOT = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")


def pcie_root(sysfs_root: Path, bdf: str) -> str | None:
    """"pci0000:00" for a GPU below that host bridge; None when sysfs does not show it."""
    link = sysfs_root / "bus" / "pci" / "devices" / bdf
    try:
        resolved = link.resolve(strict=True)
    except OSError:
        return None
    for part in resolved.parts:
        if _ROOT.match(part):
            return part
    return None
