"""Reading the habanalabs sysfs tree under a configurable root (hardware.md 5.3).

Real sysfs files end in a newline; Intel's fake trees write none. Every read
strips surrounding whitespace so both read the same.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

DRIVER_DIR = Path("bus/pci/drivers/habanalabs")
VIRTUAL_ACCEL_DIR = Path("devices/virtual/accel")
BDF_PATTERN = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
ACCEL_PATTERN = re.compile(r"^accel(\d+)$")
UVERBS_PATTERN = re.compile(r"^uverbs(\d+)$")
PCIE_ROOT_PATTERN = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")


def read_text(path: Path) -> str | None:
    """The file's content without surrounding whitespace, or None when it cannot be read."""
    try:
        return path.read_text(errors="replace").strip()
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


def numbered_entries(directory: Path, pattern: re.Pattern[str]) -> list[int]:
    """The numbers N of entries named like `pattern` (e.g. accel<N>) in `directory`, sorted."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(int(match.group(1)) for name in names if (match := pattern.match(name)))


def bound_functions(sysfs_root: Path) -> list[str]:
    """PCI addresses bound to habanalabs: the BDF entries of the driver directory."""
    try:
        names = os.listdir(sysfs_root / DRIVER_DIR)
    except OSError:
        return []
    return sorted(name for name in names if BDF_PATTERN.match(name))


def pcie_root(device_dir: Path) -> str | None:
    """The `pci<domain>:<bus>` root complex in the device's resolved path, as Kubernetes' helper finds it."""
    try:
        resolved = device_dir.resolve(strict=True)
    except OSError:
        return None
    for part in resolved.parts:
        if PCIE_ROOT_PATTERN.match(part):
            return part
    return None
