"""The kernel's boot ID: what makes runtime state (checkpoint records, backend and simulated-hardware records) boot-scoped."""

from __future__ import annotations

from pathlib import Path

from dra_driver.common import node_file

DEFAULT_BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def read_boot_id(path: Path = DEFAULT_BOOT_ID_PATH) -> str:
    try:
        return node_file.read_regular(path, 256, follow_symlinks=True).decode(errors="replace").strip()
    except OSError:
        # Without a boot ID (non-Linux, tests) state survives restarts; that is the safe side.
        return ""
