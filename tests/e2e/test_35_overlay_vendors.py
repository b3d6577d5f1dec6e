"""The simulated overlay for the other vendors: the same DaemonSet from the image with the overlay's one profile
setting changed (docs/install.md: "The profile, chosen here and only here"), AMD and Gaudi workloads on node-2."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from .daemonset import OVERLAY, ds_settled, remove_simulated
from .kit import Kit
from tests.support import eventually
from .workloads import NAMESPACE, claim_pod, claim_template, devices_of, seen_in, spec_edits

CASES = [
    ("mi300x", "gpu.amd.com", "gpu.amd.com", r"^/dev/dri/renderD\d+$"),
    ("gaudi3-hls", "gaudi.intel.com", "gaudi.intel.com", r"^/dev/accel/accel\d+$"),
]


def overlay_with_profile(directory: Path, profile: str) -> Path:
    """A kustomization on top of deploy/overlays/simulated that only sets DRA_DRIVER_PROFILE, as a user would."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n- {os.path.relpath(OVERLAY, directory)}\n"  # kustomize takes no absolute base
        "configMapGenerator:\n- name: dra-driver-config\n  namespace: dra-driver\n  behavior: merge\n"
        f"  literals:\n  - DRA_DRIVER_PROFILE={profile}\n"
    )
    return directory


@pytest.mark.parametrize(("profile", "driver", "device_class", "node_pattern"), CASES, ids=[case[0] for case in CASES])
def test_the_simulated_overlay_serves_every_vendor(node2: Kit, tmp_path: Path, profile: str, driver: str, device_class: str, node_pattern: str):
    kit = node2
    overlay = overlay_with_profile(tmp_path / profile, profile)
    kit.kubectl("label", "node", "node-2", "dra-driver.io/accelerator=simulated", "--overwrite")
    try:
        kit.apply_k(overlay)
        eventually(lambda: ds_settled(kit), "the DaemonSet ready on node-2", 240, step=1)
        eventually(lambda: kit.slices("node-2", driver), f"node-2's {driver} slices", 120, step=0.25)
        pod = f"ov-{profile}"
        kit.apply([claim_template(f"t-{pod}", device_class, 1), claim_pod(pod, f"t-{pod}", node="node-2")])
        kit.wait_pod_running(NAMESPACE, pod)
        claim = kit.claim_of(NAMESPACE, pod)
        assert len(devices_of(claim)) == 1
        seen = seen_in(kit, pod)
        edits = spec_edits(kit.cri_home / "run-cdi", claim["metadata"]["uid"])
        assert [n for n in seen.nodes if re.match(node_pattern, n)], sorted(seen.nodes)
        assert {n for n in edits.nodes if re.match(node_pattern, n)} <= seen.nodes
        assert all(seen.env.get(key) == value for key, value in edits.env.items()), (edits.env, seen.env)
    finally:
        kit.kubectl("-n", NAMESPACE, "delete", "pods", "--all", "--wait=true", "--timeout=120s", check=False, timeout=180)
        kit.kubectl("delete", "-k", str(overlay), "--ignore-not-found", "--wait=true", "--timeout=120s", check=False, timeout=180)
        remove_simulated(kit)
