"""What a benchmark's `dra-driver run` needs that the daemon does not create: the kubelet's plugin directories and
the container runtime's CDI directory (on a node they exist before the driver starts), and `--simulated-root none`
(no container runtime reads a benchmark's specs)."""

from __future__ import annotations

from pathlib import Path

SIMULATED = ("--simulated-root", "none")


def node_dirs(kubelet_dir: Path | str, cdi_dir: Path | str) -> None:
    for path in (Path(kubelet_dir) / "plugins_registry", Path(kubelet_dir) / "plugins", Path(cdi_dir)):
        path.mkdir(parents=True, exist_ok=True)
