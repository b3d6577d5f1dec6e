"""Helpers for the crash tests: run example_daemon.py as a subprocess, hold points, waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.prepare import HOLD_ENV, HOLD_POINTS
from dra_driver.node.plugin.sockets import PluginPaths

DAEMON = Path(__file__).parents[1] / "example_daemon.py"  # next to the example backend it runs


def start_daemon(api_url: str, root: Path, hold: Path | None = None, devices: int = 8) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop(HOLD_ENV, None)
    if hold is not None:
        env[HOLD_ENV] = str(hold)
    return subprocess.Popen([sys.executable, str(DAEMON), api_url, str(root), str(devices)], env=env, stderr=subprocess.DEVNULL, text=True)


def hold_at(hold: Path, uid: str, point: str) -> None:
    """Ask the daemon's test hook to stop claim `uid` at `point` (prepare.HOLD_POINTS), or "never"."""
    assert point in (*HOLD_POINTS, "never"), point
    (hold / f"{uid}.point").write_text(point)


def registers(paths: PluginPaths) -> bool:
    try:
        register(paths.registration_socket, timeout=1.0).close()
        return True
    except Exception:
        return False


def record_of(paths: PluginPaths, uid: str) -> dict[str, Any] | None:
    """The last record line of a claim's checkpoint file (format 2), or None without a file."""
    path = paths.checkpoint / f"{uid}.json"
    if not path.exists():
        return None
    return json.loads(path.read_text().split()[-1])["body"]["record"]
