"""The simulated overlay's DaemonSet on node-2, installed and removed as docs/install.md says (section 7)."""

from __future__ import annotations

from typing import Any

from .conftest import REPO
from .kit import Kit
from tests.support import eventually
from .workloads import NAMESPACE

OVERLAY = REPO / "deploy" / "overlays" / "simulated"
DS_NAMESPACE = "dra-driver"
DS_NAME = "dra-driver-kubelet-plugin"
DRIVER = "gpu.nvidia.com"


def ds(kit: Kit) -> dict[str, Any]:
    return dict(kit.get("-n", DS_NAMESPACE, "daemonset", DS_NAME))


def ds_settled(kit: Kit) -> bool:
    status = ds(kit).get("status", {})
    return (
        status.get("desiredNumberScheduled", 0) >= 1
        and status.get("numberReady") == status.get("desiredNumberScheduled")
        and status.get("updatedNumberScheduled") == status.get("desiredNumberScheduled")
        and status.get("numberAvailable") == status.get("desiredNumberScheduled")
        and status.get("observedGeneration") == ds(kit)["metadata"]["generation"]
    )


def install_simulated(kit: Kit) -> None:
    """node-2 labelled, the overlay applied, the DaemonSet ready and node-2's slices published."""
    kit.kubectl("label", "node", "node-2", "dra-driver.io/accelerator=simulated", "--overwrite")
    kit.apply_k(OVERLAY)
    eventually(lambda: ds_settled(kit), "the DaemonSet ready on node-2", 240, step=1)
    eventually(lambda: kit.slices("node-2", DRIVER), "node-2's slices", 120, step=0.25)


def remove_simulated(kit: Kit) -> None:
    """What is left after a test, removed in the documented order: claim pods first, then the driver."""
    kit.kubectl("-n", NAMESPACE, "delete", "pods", "--all", "--wait=true", "--timeout=120s", check=False, timeout=180)
    kit.kubectl("delete", "-k", str(OVERLAY), "--ignore-not-found", "--wait=true", "--timeout=120s", check=False, timeout=180)
    kit.kubectl("label", "node", "node-2", "dra-driver.io/accelerator-", check=False)
