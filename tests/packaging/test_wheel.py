"""The built wheel carries everything a non-editable install needs (CI installs editable)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("dra_driver-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_vendor_packages_are_namespaced(wheel_names: set[str]) -> None:
    tops = {name.split("/")[0] for name in wheel_names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"dra_driver", "dra_driver_nvidia", "dra_driver_amd", "dra_driver_gaudi", "dra_driver_deviceclasses"}


@pytest.mark.parametrize(
    "path",
    [
        "dra_driver_nvidia/profiles/dgx-h100.yaml",
        "dra_driver_amd/profiles/mi300x.yaml",
        "dra_driver_gaudi/profiles/gaudi3-hls.yaml",
        "dra_driver/backend/profiles/mixed-node.yaml",
        "dra_driver_deviceclasses/gpu.nvidia.com.yaml",
        "dra_driver/api/dra/v1/api_pb2_grpc.py",
        "dra_driver/api/pluginregistration/v1/api_pb2.py",
    ],
)
def test_data_and_stubs_are_packaged(wheel_names: set[str], path: str) -> None:
    assert path in wheel_names


def test_entry_points_declared(wheel_names: set[str], tmp_path: Path) -> None:
    meta = next(n for n in wheel_names if n.endswith(".dist-info/entry_points.txt"))
    assert meta
