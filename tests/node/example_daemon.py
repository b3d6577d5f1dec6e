"""Run the real Daemon with the example backend as a separate process (crash tests).

usage: example_daemon.py API_URL ROOT [DEVICES] [KUBELET_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from example_backend import ExampleBackend  # noqa: E402

from dra_driver.node.daemon import Daemon  # noqa: E402
from dra_driver.kube.claims import ClaimReader  # noqa: E402
from dra_driver.kube.client import make_json_api  # noqa: E402
from dra_driver.common.logs import configure_logging  # noqa: E402
from dra_driver.node.plugin.driver import PluginSettings  # noqa: E402
from dra_driver.backend.interface import BackendSettings  # noqa: E402


def main() -> int:
    api_url, root = sys.argv[1], Path(sys.argv[2])
    configure_logging(verbosity=1)
    kubelet_dir = Path(sys.argv[4]) if len(sys.argv) > 4 else root / "kubelet"
    settings = PluginSettings(
        node_name="node-a", kubelet_dir=kubelet_dir, cdi_dir=root / "cdi", state_dir=root / "run", boot_id_path=root / "boot_id"
    )
    devices = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    backend = ExampleBackend(BackendSettings(node_name="node-a", state_dir=root / "state"), devices)
    claims = ClaimReader(make_json_api(api_url))
    return Daemon([backend], claims, settings).run_until_signal()


if __name__ == "__main__":
    sys.exit(main())
