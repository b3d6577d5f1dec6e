"""The NVIDIA component points the backend at the mounted driver root, never at LD_LIBRARY_PATH."""

from __future__ import annotations

from pathlib import Path

import yaml

PATCH = Path(__file__).resolve().parents[2] / "deploy/components/nvidia/patch.yaml"


def test_nvidia_component_uses_driver_root_not_ld_library_path() -> None:
    patch = yaml.safe_load(PATCH.read_text())
    container = patch["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert "LD_LIBRARY_PATH" not in env
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert env["DRA_DRIVER_DRIVER_ROOT"] == mounts["nvidia-driver-root"]
