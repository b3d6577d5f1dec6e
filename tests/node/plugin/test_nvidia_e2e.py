"""End to end with the real NVIDIA backend over its fake NVML (dgx-h100 profile), and the demo command."""

from __future__ import annotations

import argparse
import io
import json
import re

import pytest
from tests.node.conftest import make_settings

from dra_driver.node.daemon import Daemon
from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.kube.claims import ClaimReader
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.backend.interface import BackendSettings, ClaimRef

nvidia = pytest.importorskip("dra_driver_nvidia.backend")


def test_prepare_unprepare_with_nvidia_backend(short_tmp, apiserver):
    settings = make_settings(short_tmp)
    profile = load_profile("dgx-h100")
    backend = nvidia.NvidiaBackend.from_profile(profile.sections["nvidia"], BackendSettings(node_name="node-a"))
    daemon = Daemon([backend], ClaimReader(apiserver.json_api()), settings)
    assert daemon.start().running == ["gpu.nvidia.com"]
    try:
        plugin = daemon.plugins["gpu.nvidia.com"]
        stored = apiserver.store.put(allocated_claim_object("train", "default", "gpu.nvidia.com", "node-a", {"gpu": ["gpu-3"]}))
        ref = ClaimRef("default", "train", stored["metadata"]["uid"])
        conn = register(plugin.paths.registration_socket)
        entry = conn.prepare([ref]).claims[ref.uid]
        assert entry.error == ""
        assert entry.devices[0].cdi_device_ids[0] == f"k8s.gpu.nvidia.com/device={ref.uid}-node-a-gpu-3"
        spec = json.loads((settings.cdi_dir / f"k8s.gpu.nvidia.com-device_{ref.uid}.json").read_text())
        paths = [n["path"] for d in spec["devices"] for n in d["containerEdits"].get("deviceNodes", [])]
        assert "/dev/nvidia3" in paths
        env = spec.get("containerEdits", {}).get("env", []) + [e for d in spec["devices"] for e in d["containerEdits"].get("env", [])]
        assert "NVIDIA_VISIBLE_DEVICES=void" in spec["containerEdits"]["env"]  # claim-level: legacy runtimes inject nothing
        assert any(e.startswith("NVIDIA_DRA_UUID_GPU_3=GPU-") for e in env)
        mounts = {m["containerPath"] for m in spec["containerEdits"]["mounts"]}
        assert "/usr/lib/x86_64-linux-gnu/libcuda.so.1" in mounts and "/usr/bin/nvidia-smi" in mounts
        assert conn.unprepare([ref]).claims[ref.uid].error == ""
        assert not any(settings.cdi_dir.iterdir())
        conn.close()
    finally:
        daemon.stop()
        backend.close()


def test_demo_runs_without_root_or_cluster(short_tmp):
    from dra_driver.cli.demo import run_demo

    out = io.StringIO()
    args = argparse.Namespace(profile="dgx-h100", vendor=None, count=2, partitioning="static", device_class=None, work_dir=short_tmp / "w")
    assert run_demo(args, out) == 0
    text = out.getvalue()
    assert "kubelet uses v1.DRAPlugin" in text
    assert "k8s.gpu.nvidia.com/device=" in text and "NVIDIA_VISIBLE_DEVICES=" in text
    assert "CDI spec file removed" in text and "its sockets were removed" in text
    assert not list((short_tmp / "w" / "cdi").glob("*.json"))
    assert "Published 1 ResourceSlice for pool" in text
    assert "2 x DeviceClass gpu.nvidia.com" in text and "request 'gpus' -> gpu-0, gpu-1" in text


def test_demo_allocates_through_the_allocator_and_skips_gpus_in_mig_mode(short_tmp):
    """dgx-a100-mig has MIG enabled on gpu-0..3: the gpu.nvidia.com class (type == "gpu") must not pick them."""
    from dra_driver.cli.demo import run_demo

    out = io.StringIO()
    args = argparse.Namespace(profile="dgx-a100-mig", vendor=None, count=2, partitioning="static", device_class=None, work_dir=short_tmp / "w")
    assert run_demo(args, out) == 0
    assert "request 'gpus' -> gpu-4, gpu-5" in out.getvalue()


def test_demo_refuses_a_claim_the_node_cannot_hold(short_tmp, capsys):
    from dra_driver.cli.main import main

    assert main(["demo", "--count", "9", "--work-dir", str(short_tmp / "w")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dra-driver demo: error: ") and "cannot be allocated on demo-node" in err and "needs 9, 8 usable" in err


@pytest.mark.parametrize("partitioning", ["static", "dynamic"])
def test_every_shipped_profile_has_a_demo_claim(partitioning: str) -> None:
    """`demo --profile P` for each shipped profile and vendor: the example claim is chosen from what the profile publishes
    (mi300x-cpx has partitions only, l4 one GPU) and the scheduler can allocate it; dynamic partitioning asks for a partition."""
    from dra_driver.backend.hardware_profiles import available_profiles
    from dra_driver.cli.demo import NODE, Wish, choose_request
    from dra_driver.sources import fleet as fleets

    for profile in sorted(available_profiles()):
        slices = fleets.simulated(profile, 1, partitioning, node_prefix=NODE)
        for driver in sorted({s["spec"]["driver"] for s in slices.slices}):
            mine = [s for s in slices.slices if s["spec"]["driver"] == driver]
            for item in mine:
                item["spec"]["nodeName"] = item["spec"]["pool"]["name"] = NODE
            request = choose_request(driver, mine, Wish(None, None, partitioning))
            assert request.chosen and len(request.chosen) == request.count, (profile, driver)
            if profile == "dgx-h100" and partitioning == "dynamic":
                assert request.device_class == "mig.nvidia.com", "dynamic MIG is what --partitioning dynamic demos"


def test_demo_of_a_partitioned_profile_prepares_a_partition(short_tmp):
    """mi300x-cpx failed with `gpus needs 2, 0 usable`: its GPUs are all partitions, which the whole-GPU class never picks."""
    from dra_driver.cli.demo import run_demo

    out = io.StringIO()
    args = argparse.Namespace(profile="mi300x-cpx", vendor=None, count=2, partitioning="static", device_class=None, work_dir=short_tmp / "w")
    assert run_demo(args, out) == 0
    text = out.getvalue()
    assert "2 x DeviceClass partition.gpu.amd.com" in text and "CDI spec file removed" in text


def test_demo_shows_the_users_side_first_and_folds_the_driver_files(short_tmp):
    """Someone new to DRA first sees the template and pod they would write; the ~30 driver-file mounts are counted, not listed twice."""
    from dra_driver.cli.demo import SHOWN_MOUNTS, run_demo

    out = io.StringIO()
    assert (
        run_demo(
            argparse.Namespace(profile="dgx-h100", vendor=None, count=2, partitioning="static", device_class=None, work_dir=short_tmp / "w"), out
        )
        == 0
    )
    text = out.getvalue()
    first = text.split("\n== ", 2)[0]
    assert first.startswith("== What you write") and "kind: ResourceClaimTemplate" in first and "resourceClaimTemplateName: gpus" in first
    assert "deviceClassName: gpu.nvidia.com" in first and "count: 2" in first
    mounts = [line for line in text.splitlines() if "/driver-root/usr/lib" in line]
    assert len(mounts) == 2 * SHOWN_MOUNTS  # a few in the spec, a few in what the container gets
    assert "more driver-file mounts" in text and re.search(r"mounts: \d{2}, for example:", text)
    assert len(text.splitlines()) < 200


def _share_claim(apiserver, name: str, share_id: str, memory: str) -> ClaimRef:
    obj = allocated_claim_object(name, "ml", "gpu.nvidia.com", "node-a", {"gpu": ["gpu-0"]})
    obj["status"]["allocation"]["devices"]["results"][0].update({"shareID": share_id, "consumedCapacity": {"memory": memory}})
    stored = apiserver.store.put(obj)
    return ClaimRef("ml", name, stored["metadata"]["uid"])


def test_shares_never_add_up_to_more_than_a_gpus_memory(short_tmp, apiserver):
    """--consumable-gpu-memory: the scheduler would not give one 81559Mi GPU shares of 30Gi + 40Gi + 20Gi, and the node
    does not trust that it did: the third claim fails alone, also after a restart (the shares come back from the
    records), and is prepared once a share is released."""
    settings = make_settings(short_tmp)
    backend_settings = BackendSettings(node_name="node-a", state_dir=settings.state_dir, consumable_gpu_memory=True)

    def start() -> tuple[Daemon, object]:
        backend = nvidia.NvidiaBackend.from_profile(load_profile("dgx-h100").sections["nvidia"], backend_settings)
        daemon = Daemon([backend], ClaimReader(apiserver.json_api()), settings)
        assert daemon.start().running == ["gpu.nvidia.com"]
        return daemon, backend

    a, b, c = (
        _share_claim(apiserver, n, f"4f1c2d3e-0000-4000-8000-00000000000{i}", m)
        for i, (n, m) in enumerate([("a", "30Gi"), ("b", "40Gi"), ("c", "20Gi")])
    )
    daemon, backend = start()
    try:
        conn = register(daemon.plugins["gpu.nvidia.com"].paths.registration_socket)
        answers = conn.prepare([a, b]).claims
        assert answers[a.uid].error == "" and answers[b.uid].error == ""
        error = conn.prepare([c]).claims[c.uid].error
        assert "device node-a/gpu-0 would have 90Gi of its memory consumed by 3 shares, more than its capacity 81559Mi" in error
        conn.close()
    finally:
        daemon.stop()
        backend.close()
    daemon, backend = start()  # a restart: the shares prepared are rebuilt from the records
    try:
        conn = register(daemon.plugins["gpu.nvidia.com"].paths.registration_socket)
        assert "more than its capacity 81559Mi" in conn.prepare([c]).claims[c.uid].error
        assert conn.unprepare([a]).claims[a.uid].error == ""
        assert conn.prepare([c]).claims[c.uid].error == ""  # 60Gi now
        assert all(e.error == "" for e in conn.unprepare([b, c]).claims.values())
        conn.close()
    finally:
        daemon.stop()
        backend.close()
