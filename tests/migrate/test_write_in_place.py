"""`migrate -w` rewrites a manifest atomically: its mode is kept and no temp file is left beside it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from dra_driver.cli.main import main
from migrate_testlib import device_plugin_requests

POD = """apiVersion: v1
kind: Pod
metadata:
  name: trainer
spec:
  containers:
  - name: main
    image: registry.example.com/train:1
    resources:
      limits:
        nvidia.com/gpu: 1
"""


@pytest.mark.parametrize("mode", [0o640, 0o604])
def test_rewritten_file_keeps_its_mode_and_leaves_no_temp_file(tmp_path: Path, mode: int, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD)
    manifest.chmod(mode)
    assert main(["migrate", "-w", str(manifest)]) == 0
    text = manifest.read_text()
    assert not device_plugin_requests(text) and "kind: ResourceClaimTemplate" in text
    assert stat.S_IMODE(manifest.stat().st_mode) == mode
    assert [p.name for p in tmp_path.iterdir()] == ["pod.yaml"]
    capsys.readouterr()
