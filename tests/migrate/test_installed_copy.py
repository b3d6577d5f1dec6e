"""`migrate` from an installed wheel (not the source checkout) finds the shipped DeviceClasses.

The wheel is built from a copy of the tracked sources (a stale build/ in the
checkout must not leak into it) and installed with --target into a temporary
directory that is put first on PYTHONPATH; the command runs from another
directory, and the test checks that the modules really came from that copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("dra_driver", "vendors", "deviceclasses", "setup.py", "pyproject.toml", "README.md")
MIG_SINGLE_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: mig
spec:
  containers:
  - name: c
    image: cuda
    resources:
      limits:
        nvidia.com/mig-1g.5gb: 1
        amd.com/gpu: 1
"""


def _pip(*args: str, cwd: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "-q", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"pip {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("wheel", reason="the test extra installs wheel (needed to build the wheel offline)")
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip("setuptools>=77 (test extra) is needed to build the wheel without build isolation")
    root = tmp_path_factory.mktemp("installed")
    source = root / "src"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(root / "wheel"), ".", cwd=source)
    [wheel] = (root / "wheel").glob("*.whl")
    _pip("install", "--no-deps", "--no-index", "--target", str(root / "site"), str(wheel), cwd=root)
    shutil.rmtree(source)
    return root


def _run(installed: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(installed / "site")}
    env.pop("DRA_DRIVER_DEVICECLASSES", None)
    return subprocess.run([sys.executable, *args], cwd=installed, env=env, input=stdin, capture_output=True, text=True)


def test_the_installed_copy_is_what_runs(installed: Path) -> None:
    done = _run(installed, "-c", "import dra_driver, dra_driver_deviceclasses as d; print(dra_driver.__file__); print(d.__file__)")
    assert done.returncode == 0, done.stderr
    for line in done.stdout.split():
        assert Path(line).is_relative_to(installed / "site"), line


def test_installed_migrate_uses_the_shipped_mig_class(installed: Path) -> None:
    done = _run(installed, "-m", "dra_driver.cli.main", "migrate", "--report", "json", "-", stdin=MIG_SINGLE_POD)
    assert done.returncode == 0, done.stderr
    assert "deviceClassName: mig-1g.5gb.nvidia.com" in done.stdout
    assert "mig.nvidia.com" not in done.stdout.replace("mig-1g.5gb.nvidia.com", "")
    assert "deviceClassName: gpu.amd.com" in done.stdout


def test_installed_extended_strategy_reuses_shipped_classes(installed: Path) -> None:
    done = _run(installed, "-m", "dra_driver.cli.main", "migrate", "--strategy", "extended-resource", "--report",
                "json", "-", stdin=MIG_SINGLE_POD)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stderr)
    generated = {f["subject"] for f in report["findings"] if f["action"] == "generated"}
    assert "DeviceClass/extended.gpu.nvidia.com" not in generated
    assert "DeviceClass/extended.gpu.amd.com" not in generated  # shipped: referenced, never re-emitted
    assert "name: extended.gpu.amd.com" not in done.stdout
