"""Every vendor's CDI specs, prepared by the real daemon, applied by a real container runtime.

For each profile family a claim with two requests is prepared over the kubelet socket; one container names
one request, another names both, each gets exactly the CDI IDs the kubelet would pass. Inside, the test reads
which device nodes exist, the environment, the NVIDIA driver files at their paths, and runs the (simulated)
nvidia-smi the spec mounted from the driver root.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

import pytest
from .conftest import Podman, ProfileNode, profile_node

from dra_driver_nvidia.simulated import fake_driver_root

pytestmark = pytest.mark.container_runtime

VENDOR_NODES = ("/dev/nvidia", "/dev/kfd", "/dev/dri/", "/dev/accel/", "/dev/infiniband/")
LIBCUDA = f"/{fake_driver_root.LIB_DIR}/libcuda.so.1"
SCRIPT = f"""
echo @nodes; find /dev -type c
echo @env; env
echo @files; find /usr /lib /var/run /tmp 2>/dev/null
echo @smi; if [ -x /usr/bin/nvidia-smi ]; then /usr/bin/nvidia-smi; fi
echo @libcuda; if [ -e {LIBCUDA} ]; then cat {LIBCUDA}; fi
"""


@dataclass
class Seen:
    nodes: set[str]
    env: dict[str, str]
    files: set[str]
    smi: str
    libcuda: str


def look_inside(podman: Podman, node: ProfileNode, *references: tuple[str, str | None]) -> Seen:
    podman.publish(node.spec_files())
    try:
        out = podman.run(node.cdi_ids(*references), SCRIPT)
    finally:
        podman.unpublish()
    sections: dict[str, list[str]] = {}
    current = ""
    for line in out.splitlines():
        if line.startswith("@"):
            current = line[1:]
            sections[current] = []
        elif current:
            sections[current].append(line)
    return Seen(
        nodes={p for p in sections["nodes"] if p.startswith(VENDOR_NODES)},
        env=dict(line.split("=", 1) for line in sections["env"] if "=" in line),
        files=set(sections["files"]),
        smi="\n".join(sections["smi"]),
        libcuda="\n".join(sections["libcuda"]),
    )


def claim_mounts(node: ProfileNode) -> set[str]:
    return {m["containerPath"] for spec in node.specs() for m in (spec.get("containerEdits") or {}).get("mounts", [])}


def nvidia_version(node: ProfileNode) -> str:
    backend = next(b for b in node.daemon.backends if b.vendor == "nvidia")
    return backend.simulator.section.driverVersion  # type: ignore[attr-defined]


def assert_nvidia_driver_files(node: ProfileNode, seen: Seen) -> None:
    version = nvidia_version(node)
    mounts = claim_mounts(node)
    assert {"/usr/bin/nvidia-smi", LIBCUDA, f"/lib/firmware/nvidia/{version}/gsp_ga10x.bin"} <= mounts
    assert mounts <= seen.files, f"driver files missing in the container: {sorted(mounts - seen.files)}"
    assert f"driver {version}" in seen.smi  # the host's binary runs in an image that has none
    assert seen.libcuda == f"simulated libcuda {version}"  # the soname path is the versioned host file
    # The image says NVIDIA_VISIBLE_DEVICES=all; a legacy nvidia-container-runtime must inject nothing more.
    assert seen.env["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_dgx_h100_whole_gpus(podman: Podman) -> None:
    with profile_node("dgx-h100") as node:
        node.prepare("train", "gpu.nvidia.com", {"a": ["gpu-0"], "b": ["gpu-1", "gpu-2"]})
        one = look_inside(podman, node, ("train", "a"))
        assert one.nodes == {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
        assert "NVIDIA_DRA_UUID_GPU_0" in one.env and "NVIDIA_DRA_UUID_GPU_1" not in one.env
        assert_nvidia_driver_files(node, one)
        assert "/tmp/nvidia-mps" not in one.files  # no MPS configured

        both = look_inside(podman, node, ("train", "a"), ("train", "b"))
        assert {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"} <= both.nodes and "/dev/nvidia3" not in both.nodes
        assert {"NVIDIA_DRA_UUID_GPU_0", "NVIDIA_DRA_UUID_GPU_1", "NVIDIA_DRA_UUID_GPU_2"} <= set(both.env)
        assert both.env["NVIDIA_VISIBLE_DEVICES"] == "void"

        # Two claims in one container: both specs mount the same driver files at the same paths.
        node.prepare("infer", "gpu.nvidia.com", {"gpu": ["gpu-5"]})
        two_claims = look_inside(podman, node, ("train", "a"), ("infer", None))
        assert {"/dev/nvidia0", "/dev/nvidia5"} <= two_claims.nodes and "/dev/nvidia1" not in two_claims.nodes
        assert_nvidia_driver_files(node, two_claims)


def test_dgx_h100_mps_claim_reaches_its_control_daemon_with_its_limits(podman: Podman) -> None:
    config = [{"requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": {"strategy": "MPS", "mpsConfig": {
            "defaultActiveThreadPercentage": 30, "defaultPinnedDeviceMemoryLimit": "20Gi"}}}}}]  # fmt: skip
    with profile_node("dgx-h100") as node:
        node.prepare("mps", "gpu.nvidia.com", {"gpu": ["gpu-3"]}, config=config)
        mounts = {m["containerPath"]: m["hostPath"] for spec in node.specs() for m in (spec.get("containerEdits") or {}).get("mounts", [])}
        pipe, shm = Path(mounts["/tmp/nvidia-mps"]), Path(mounts["/dev/shm"])
        (shm / "from-the-server").write_text("segment\n")  # what the MPS server puts into its shm directory
        podman.publish(node.spec_files())
        try:
            out = podman.run(node.cdi_ids(("mps", None)), "ls -l /tmp/nvidia-mps; cat /tmp/nvidia-mps/nvidia-cuda-mps-control.pid; "
                                                       "cat /dev/shm/from-the-server; env")  # fmt: skip
        finally:
            podman.unpublish()
        daemon_pid = (pipe / "nvidia-cuda-mps-control.pid").read_text().strip()
        assert Path(f"/proc/{daemon_pid}/cmdline").read_bytes().split(b"\0")[1].endswith(b"nvidia-cuda-mps-control")
        lines = out.splitlines()
        assert any(line.startswith("s") and line.endswith(" control") for line in lines)  # the daemon's socket
        assert daemon_pid in lines and "segment" in lines
        assert sorted(line for line in lines if line.startswith("CUDA_MPS_")) == [
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"]


def test_dgx_h100_dynamic_mig(podman: Podman) -> None:
    with profile_node("dgx-h100", partitioning="dynamic") as node:
        node.prepare("mig", "gpu.nvidia.com", {"a": ["gpu-3-mig-3g40gb-9-4"], "b": ["gpu-3-mig-1g10gb-19-1"]})
        one = look_inside(podman, node, ("mig", "a"))
        caps = {p for p in one.nodes if p.startswith("/dev/nvidia-caps/")}
        assert "/dev/nvidia3" in one.nodes and len(caps) == 2  # GI and CI access of this MIG device only
        assert [v for k, v in one.env.items() if k.startswith("NVIDIA_DRA_UUID_")][0].startswith("MIG-")
        assert_nvidia_driver_files(node, one)

        both = look_inside(podman, node, ("mig", "a"), ("mig", "b"))
        assert len({p for p in both.nodes if p.startswith("/dev/nvidia-caps/")}) == 4
        assert len([k for k in both.env if k.startswith("NVIDIA_DRA_UUID_")]) == 2


@pytest.mark.parametrize(("profile", "first", "second"), [("mi300x", "gpu-0-128", "gpu-8-136"), ("mi300x-cpx", "gpu-0-128", "gpu-1-129")])
def test_amd(podman: Podman, profile: str, first: str, second: str) -> None:
    with profile_node(profile) as node:
        node.prepare("rocm", "gpu.amd.com", {"a": [first], "b": [second]})
        render_a, render_b = (f"/dev/dri/renderD{name.rsplit('-', 1)[1]}" for name in (first, second))
        one = look_inside(podman, node, ("rocm", "a"))
        assert "/dev/kfd" in one.nodes and render_a in one.nodes and render_b not in one.nodes
        assert len([p for p in one.nodes if p.startswith("/dev/dri/card")]) == 1
        assert claim_mounts(node) == set() and not any(k.startswith("NVIDIA_DRA") for k in one.env)  # ROCm images bring their own user space

        both = look_inside(podman, node, ("rocm", "a"), ("rocm", "b"))
        assert {render_a, render_b} <= both.nodes


def test_gaudi3(podman: Podman) -> None:
    with profile_node("gaudi3-hls") as node:
        backend = node.daemon.backends[0]
        first, second = [d.name for d in backend.discover().devices][:2]
        node.prepare("hpu", "gaudi.intel.com", {"a": [first], "b": [second]})
        one = look_inside(podman, node, ("hpu", "a"))
        accel = sorted(p for p in one.nodes if p.startswith("/dev/accel/accel") and "control" not in p)
        assert len(accel) == 1
        index = accel[0].removeprefix("/dev/accel/accel")
        assert f"/dev/accel/accel_controlD{index}" in one.nodes
        assert one.env["HABANA_VISIBLE_DEVICES"] == index and one.env["HL_VISIBLE_DEVICES"] == accel[0]

        both = look_inside(podman, node, ("hpu", "a"), ("hpu", "b"))
        assert len([p for p in both.nodes if p.startswith("/dev/accel/accel") and "control" not in p]) == 2


def test_mixed_node_one_container_two_vendors(podman: Podman) -> None:
    with profile_node("mixed-node") as node:
        node.prepare("cuda", "gpu.nvidia.com", {"gpu": ["gpu-1"]})
        node.prepare("rocm", "gpu.amd.com", {"gpu": ["gpu-8-136"]})
        seen = look_inside(podman, node, ("cuda", None), ("rocm", None))
        assert {"/dev/nvidia1", "/dev/kfd", "/dev/dri/renderD136"} <= seen.nodes and "/dev/nvidia0" not in seen.nodes
        assert_nvidia_driver_files(node, seen)


def test_nvidia_cdi_hook_runs_with_the_arguments_upstream_uses(podman: Podman, tmp_path: Path) -> None:
    """A stand-in for nvidia-cdi-hook records its arguments: the runtime accepts and runs both hooks."""
    log = tmp_path / "hook.log"
    hook = tmp_path / "nvidia-cdi-hook"
    hook.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    with profile_node("dgx-h100", nvidia_cdi_hook_path=str(hook)) as node:
        node.prepare("hooked", "gpu.nvidia.com", {"gpu": ["gpu-0"]})
        seen = look_inside(podman, node, ("hooked", None))
        assert LIBCUDA not in seen.files  # the hook makes the soname links; the spec no longer mounts them
    lines = log.read_text().splitlines()
    assert any(line.startswith("create-symlinks --link libcuda.so.") for line in lines)
    assert f"update-ldcache --folder /{fake_driver_root.LIB_DIR}" in lines
