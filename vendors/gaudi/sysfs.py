"""Reading the habanalabs sysfs tree under a configurable root (habanalabs sysfs ABI document).

Real sysfs files end in a newline; Intel's fake trees write none. Every read
strips surrounding whitespace (dra_driver.backend.sysfs) so both read the same.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from dra_driver.backend.sysfs import BDF_PATTERN

DRIVER_DIR = Path("bus/pci/drivers/habanalabs")
VIRTUAL_ACCEL_DIR = Path("devices/virtual/accel")
ACCEL_PATTERN = re.compile(r"^accel(\d+)\Z")
UVERBS_PATTERN = re.compile(r"^uverbs(\d+)\Z")


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

