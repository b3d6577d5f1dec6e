"""A simulated node inside a real cluster (deploy/overlays/simulated): the specs an in-pod driver writes run in a container.

The driver runs as a pod would run it: `dra-driver run --profile ... --simulated-root <host path>` in its own process
with a private $TMPDIR (the pod's emptyDir /tmp), its own --pod-uid, and the kubelet, state and CDI dirs of the node.
Claims are prepared over its sockets as the kubelet does; then the pod goes (SIGTERM, its /tmp deleted) and podman
runs containers from the specs it left: every device node and driver file they name is on the host path. A second
driver pod shares the root; the root is emptied only when the last claim is gone and the last pod stops.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from .conftest import NODE, Podman
from tests.support import eventually

from dra_driver.simulation import api_server as sim_apiserver
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import ClaimRef

pytestmark = pytest.mark.container_runtime

DRIVER = "gpu.nvidia.com"
SCRIPT = "echo @nodes; find /dev -type c; echo @smi; /usr/bin/nvidia-smi"
VENDOR_NODES = ("/dev/nvidia", "/dev/kfd", "/dev/dri/", "/dev/accel/")


@dataclass
class Host:
    root: Path
    server: sim_apiserver.SimApiServer

    @property
    def simulated_root(self) -> Path:
        return self.root / "var-run" / "dra-driver-sim"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    def driver_pod(self, pod_uid: str, profile: str = "dgx-h100", driver: str = DRIVER) -> DriverPod:
        private_tmp = Path(tempfile.mkdtemp(prefix=f"pod-{pod_uid}-tmp-", dir=self.root))
        for owned_by_others in (self.root / "kubelet" / "plugins_registry", self.root / "kubelet" / "plugins", self.cdi_dir):  # run creates none
            owned_by_others.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable, "-m", "dra_driver.cli.main", "run", "--profile", profile, "--simulated-root", str(self.simulated_root),
            "--node-name", NODE, "--pod-uid", pod_uid, "--api-server", self.server.url, "--kubelet-dir", str(self.root / "kubelet"),
            "--cdi-dir", str(self.cdi_dir), "--state-dir", str(self.root / "state"),
        ]  # fmt: skip
        process = subprocess.Popen(
            command, env={**os.environ, "TMPDIR": str(private_tmp)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        pod = DriverPod(process, private_tmp, PluginPaths(self.root / "kubelet", driver, pod_uid))
        pod.wait_serving()
        return pod

    def claim(self, name: str, devices: dict[str, list[str]], driver: str = DRIVER) -> ClaimRef:
        stored = self.server.store.put(allocated_claim_object(name, "default", driver, NODE, devices))
        return ClaimRef("default", name, stored["metadata"]["uid"])


@dataclass
class DriverPod:
    process: subprocess.Popen[str]
    private_tmp: Path
    paths: PluginPaths

    def wait_serving(self) -> None:
        try:
            eventually(lambda: self.paths.registration_socket.exists() or self.process.poll() is not None, "the driver pod's socket", 120, step=0.05)
        finally:
            if not self.paths.registration_socket.exists():
                self.process.kill()
                pytest.fail(f"the driver pod never served: {self.process.communicate()[1]}")

    def prepare(self, ref: ClaimRef) -> list[str]:
        conn = register(self.paths.registration_socket)
        try:
            entry = conn.prepare([ref]).claims[ref.uid]
        finally:
            conn.close()
        assert entry.error == "", entry.error
        return [cdi_id for device in entry.devices for cdi_id in device.cdi_device_ids]

    def unprepare(self, ref: ClaimRef) -> None:
        conn = register(self.paths.registration_socket)
        try:
            assert conn.unprepare([ref]).claims[ref.uid].error == ""
        finally:
            conn.close()

    def delete(self) -> None:
        """The pod goes: SIGTERM, then its emptyDir /tmp with it."""
        self.process.send_signal(signal.SIGTERM)
        _, err = self.process.communicate(timeout=60)
        assert self.process.returncode == 0, err
        shutil.rmtree(self.private_tmp)


@pytest.fixture
def host() -> Iterator[Host]:
    root = Path(tempfile.mkdtemp(prefix="dra-simnode-", dir="/tmp"))
    try:
        with sim_apiserver.SimApiServer() as server:
            server.add_node(NODE)
            yield Host(root, server)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def host_paths(spec_file: Path) -> set[str]:
    spec = json.loads(spec_file.read_text())
    edits = [d["containerEdits"] for d in spec["devices"]] + [spec.get("containerEdits") or {}]
    return {n.get("hostPath") or n["path"] for e in edits for n in e.get("deviceNodes", [])} | {
        m["hostPath"] for e in edits for m in e.get("mounts", [])
    }


def run_in_container(podman: Podman, host: Host, cdi_ids: list[str], script: str = SCRIPT) -> tuple[set[str], str]:
    podman.publish(sorted(host.cdi_dir.glob("*.json")))
    try:
        out = podman.run(cdi_ids, script)
    finally:
        podman.unpublish()
    nodes_part, _, smi = out.partition("@smi")
    return {line for line in nodes_part.splitlines() if line.startswith(VENDOR_NODES)}, smi.strip()


def test_workloads_start_from_specs_an_in_pod_driver_wrote_and_outlive_it(podman: Podman, host: Host) -> None:
    first = host.driver_pod("pod-1")
    train = host.claim("train", {"gpu": ["gpu-0"]})
    train_ids = first.prepare(train)
    (spec_file,) = host.cdi_dir.glob("*.json")
    named = host_paths(spec_file)
    assert named and all(Path(p).is_relative_to(host.simulated_root) for p in named), "a spec names a path only the pod can see"
    first.delete()  # the driver pod is replaced: its /tmp is gone, the claim stays prepared

    nodes, smi = run_in_container(podman, host, train_ids)
    assert {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"} <= nodes and "/dev/nvidia1" not in nodes
    assert "simulated nvidia-smi driver" in smi  # the driver root's binary, mounted from the host path

    second = host.driver_pod("pod-2")  # shares the root: builds nothing again, keeps what the first made
    infer = host.claim("infer", {"gpu": ["gpu-5"]})
    infer_ids = second.prepare(infer)
    nodes, _ = run_in_container(podman, host, train_ids + infer_ids)
    assert {"/dev/nvidia0", "/dev/nvidia5"} <= nodes
    driver_roots = [p.name for p in host.simulated_root.iterdir() if p.name.startswith("nvidia-driver-root-")]
    assert len(driver_roots) == 1

    second.unprepare(train)
    second.unprepare(infer)
    second.delete()  # the last driver pod, no prepared claim: the root is emptied
    assert [p.name for p in host.simulated_root.iterdir()] == [".lock"]


def test_the_root_stays_while_a_claim_is_prepared_and_no_driver_runs(podman: Podman, host: Host) -> None:
    pod = host.driver_pod("pod-1")
    ids = pod.prepare(host.claim("train", {"gpu": ["gpu-3"]}))
    pod.delete()  # uninstalled with a workload still holding the claim
    assert (host.simulated_root / "dev" / "nvidia3").exists()
    nodes, _ = run_in_container(podman, host, ids)  # the workload's container restarts: its spec still works
    assert "/dev/nvidia3" in nodes


@pytest.mark.parametrize(("profile", "driver", "expected"), [("mi300x", "gpu.amd.com", "/dev/kfd"), ("gaudi3-hls", "gaudi.intel.com", "/dev/accel/")])
def test_other_vendors_device_nodes_live_on_the_simulated_root(podman: Podman, host: Host, profile: str, driver: str, expected: str) -> None:
    pod = host.driver_pod("pod-1", profile, driver)
    slices = host.server.store.list
    published = eventually(lambda: [d["name"] for o in slices("resourceslices") if o["spec"]["driver"] == driver for d in o["spec"]["devices"]],
                           f"a slice of {driver}", 60, step=0.05)  # fmt: skip
    ids = pod.prepare(host.claim("job", {"dev": [published[0]]}, driver))
    pod.delete()
    (spec_file,) = host.cdi_dir.glob("*.json")
    assert all(Path(p).is_relative_to(host.simulated_root) for p in host_paths(spec_file))
    nodes, _ = run_in_container(podman, host, ids, "find /dev -type c")
    assert any(node.startswith(expected) for node in nodes), nodes
