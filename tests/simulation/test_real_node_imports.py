"""A real node never loads the simulation: dra_driver.simulation and the vendors' simulated/ subpackages are
imported only where a simulated profile is asked for (a backend's from_profile, run --simulated-root, demo)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# The daemon's path on a real node: the run command and everything it builds, then every installed backend
# opened on the host (none finds hardware here: each says why, as on a node without accelerators).
_REAL_NODE = """
import json, sys
from pathlib import Path
import dra_driver.cli.main, dra_driver.cli.run, dra_driver.node.daemon, dra_driver.node.plugin.driver
import dra_driver.node.plugin.prepare, dra_driver.node.plugin.recovery, dra_driver.node.publisher.daemon_adapter
import dra_driver.kube.claims, dra_driver.kube.claim_cache, dra_driver.node.checks.doctor
from dra_driver.backend.interface import BackendSettings
from dra_driver.backend.registry import open_backends

root = Path(sys.argv[1])
settings = BackendSettings(sysfs_root=root / "sys", dev_root=root / "dev", driver_root=root / "driver", state_dir=root / "state")
opened = open_backends(settings)
opened.close()
simulated = sorted(name for name in sys.modules if name.startswith("dra_driver.simulation") or ".simulated" in name)
print(json.dumps({"simulated": simulated, "unavailable": [p.vendor for p in opened.unavailable]}))
"""


def test_the_real_node_path_imports_no_simulation(tmp_path: Path) -> None:
    for sub in ("sys", "dev", "driver", "state"):
        (tmp_path / sub).mkdir()
    result = subprocess.run([sys.executable, "-c", _REAL_NODE, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert sorted(seen["unavailable"]) == ["amd", "gaudi", "nvidia"]  # every backend's host path ran
    assert seen["simulated"] == []


def test_a_profile_loads_the_simulation(tmp_path: Path) -> None:
    """The check above can see the simulation when it is loaded: opening a profile imports it."""
    code = _REAL_NODE.replace(
        "opened = open_backends(settings)",
        "from dra_driver.backend.hardware_profiles import load_profile\nopened = open_backends(settings, load_profile('dgx-h100'))",
    )
    for sub in ("sys", "dev", "driver", "state"):
        (tmp_path / sub).mkdir()
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "dra_driver_nvidia.simulated.fake_nvml" in json.loads(result.stdout.splitlines()[-1])["simulated"]
