"""prepare / unprepare / reconcile, including dynamic MIG instances tracked by the simulated NVML."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.common.errors import DeviceError
from dra_driver.backend.interface import AllocatedDevice, ClaimRef, DeviceNode, PreparedClaim
from dra_driver_nvidia.edits import MigMinors

from .conftest import OpenBackend, profile_section

CLAIM = ClaimRef(namespace="ns", name="claim", uid="uid-1")


def alloc(device: str, config: object = None) -> AllocatedDevice:
    return AllocatedDevice(request="gpu", pool="node-a", device=device, config=config)  # type: ignore[arg-type]


def node_paths(nodes: list[DeviceNode]) -> list[str]:
    return [n.path for n in nodes]


def device_uuids(prepared: PreparedClaim) -> list[str]:
    """The UUID each prepared device carries in its own NVIDIA_DRA_UUID_<DEVICE> variable."""
    return [e.partition("=")[2] for d in prepared.devices for e in d.edits.env if e.startswith("NVIDIA_DRA_UUID_")]


def test_full_gpu_edits(open_backend: OpenBackend) -> None:
    section = profile_section("dgx-h100")
    backend = open_backend(section)
    prepared = backend.prepare(CLAIM, [alloc("gpu-2"), alloc("gpu-5")])
    assert [d.device for d in prepared.devices] == ["gpu-2", "gpu-5"]
    assert node_paths(prepared.devices[0].edits.device_nodes) == ["/dev/nvidia2", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert device_uuids(prepared) == [section["gpus"][i]["uuid"] for i in (2, 5)]
    assert prepared.devices[0].edits.env == [f"NVIDIA_DRA_UUID_GPU_2={section['gpus'][2]['uuid']}"]
    assert prepared.request_edits == {}  # no sharing configured: nothing per request
    assert prepared.claim_edits.env == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert prepared.state == {"migInstances": []}


def test_two_requests_never_write_one_visibility_variable(open_backend: OpenBackend) -> None:
    """CDI applies env in order, last value wins: a per-request NVIDIA_VISIBLE_DEVICES list would hide the
    first request's GPUs from a container naming both. Nothing per request names devices; the claim says void."""
    section = profile_section("dgx-h100")
    backend = open_backend(section)
    devices = [
        AllocatedDevice(request="trainer", pool="node-a", device="gpu-0"),
        AllocatedDevice(request="trainer", pool="node-a", device="gpu-1"),
        AllocatedDevice(request="sidecar", pool="node-a", device="gpu-7"),
    ]
    prepared = backend.prepare(CLAIM, devices)
    uuid = [g["uuid"] for g in section["gpus"]]
    assert device_uuids(prepared) == [uuid[0], uuid[1], uuid[7]]
    names = [e.partition("=")[0] for d in prepared.devices for e in d.edits.env]
    assert len(set(names)) == len(names)  # one variable per device: none overwrites another
    assert not any(e.startswith("NVIDIA_VISIBLE_DEVICES=") for edits in prepared.request_edits.values() for e in edits.env)
    assert "NVIDIA_VISIBLE_DEVICES=void" in prepared.claim_edits.env


def test_dev_root_sets_host_paths(open_backend: OpenBackend, tmp_path: Path) -> None:
    backend = open_backend("t4", dev_root=tmp_path)
    node = backend.prepare(CLAIM, [alloc("gpu-0")]).devices[0].edits.device_nodes[0]
    assert (node.path, node.host_path) == ("/dev/nvidia0", str(tmp_path / "nvidia0"))


def test_static_mig_edits_include_capabilities(open_backend: OpenBackend) -> None:
    section = profile_section("dgx-a100-mig")
    backend = open_backend(section)
    prepared = backend.prepare(CLAIM, [alloc("gpu-1-mig-3g20gb-9-4")])
    paths = node_paths(prepared.devices[0].edits.device_nodes)
    assert paths[0] == "/dev/nvidia1"
    caps = [p for p in paths if p.startswith("/dev/nvidia-caps/nvidia-cap")]
    assert len(caps) == 2
    mig_uuid = next(m["uuid"] for m in section["gpus"][1]["migDevices"] if m["start"] == 4)
    assert device_uuids(prepared) == [mig_uuid]
    assert prepared.state == {"migInstances": []}  # static MIG devices are never created or destroyed


def test_mig_minors_read_from_proc(tmp_path: Path) -> None:
    caps = tmp_path / "driver" / "nvidia-caps"
    caps.mkdir(parents=True)
    (caps / "mig-minors").write_text("config 1\nmonitor 2\ngpu1/gi2/access 500\ngpu1/gi2/ci0/access 501\n")
    minors = MigMinors(tmp_path)
    assert (minors.minor(1, 2), minors.minor(1, 2, 0)) == (500, 501)
    assert MigMinors(None).minor(0, 0) == 3  # the driver's layout: config 1, monitor 2, gpu0/gi0 3


def test_dynamic_mig_create_and_destroy(open_backend: OpenBackend) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic")
    fake = backend.simulator
    assert fake is not None
    backend.discover()
    prepared = backend.prepare(CLAIM, [alloc("gpu-3-mig-3g40gb-9-4"), alloc("gpu-3-mig-1g10gb-19-1")])
    live = sorted(fake.live_instances())
    gpu3 = fake.gpus[3].spec.uuid
    assert sorted(start for uuid, _, start in live if uuid == gpu3) == [1, 4]
    assert fake.gpus[3].mig_mode == 1  # MIG mode switched on for the first partition
    entries = prepared.state["migInstances"]
    assert {(e["device"], e["start"]) for e in entries} == {("gpu-3-mig-3g40gb-9-4", 4), ("gpu-3-mig-1g10gb-19-1", 1)}
    mig_uuids = [e["uuid"] for e in entries]
    assert all(u.startswith("MIG-") for u in mig_uuids)
    assert device_uuids(prepared) == mig_uuids
    assert any(p.startswith("/dev/nvidia-caps/") for p in node_paths(prepared.devices[0].edits.device_nodes))

    backend.unprepare(CLAIM, prepared.state)
    assert list(fake.live_instances()) == []
    backend.unprepare(CLAIM, prepared.state)  # idempotent: nothing left is fine
    assert len(fake.destroyed) == 2


def test_prepare_twice_reuses_the_instance(open_backend: OpenBackend) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic")
    first = backend.prepare(CLAIM, [alloc("gpu-0-mig-2g20gb-14-2")])
    second = backend.prepare(CLAIM, [alloc("gpu-0-mig-2g20gb-14-2")])
    assert first.state == second.state
    assert backend.simulator is not None and len(list(backend.simulator.live_instances())) == 1


def test_failed_prepare_rolls_back_created_instances(open_backend: OpenBackend) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic")
    fake = backend.simulator
    assert fake is not None
    # 4g.40gb at 0 and 3g.40gb at 0 overlap: the second creation fails.
    with pytest.raises(DeviceError, match="gpu-1-mig-3g40gb-9-0"):
        backend.prepare(CLAIM, [alloc("gpu-1-mig-4g40gb-5-0"), alloc("gpu-1-mig-3g40gb-9-0")])
    assert list(fake.live_instances()) == []


def test_unknown_device_fails_alone(open_backend: OpenBackend) -> None:
    backend = open_backend("t4")
    with pytest.raises(DeviceError, match="gpu-9"):
        backend.prepare(CLAIM, [alloc("gpu-9")])


def test_full_gpu_in_dynamic_mode_turns_mig_off(open_backend: OpenBackend) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic")
    fake = backend.simulator
    assert fake is not None
    state = backend.prepare(CLAIM, [alloc("gpu-0-mig-1g10gb-19-0")]).state
    with pytest.raises(DeviceError, match="cannot disable MIG mode"):
        backend.prepare(ClaimRef("ns", "other", "uid-2"), [alloc("gpu-0")])
    backend.unprepare(CLAIM, state)
    backend.prepare(ClaimRef("ns", "other", "uid-2"), [alloc("gpu-0")])
    assert fake.gpus[0].mig_mode == 0


def test_reconcile_destroys_instances_no_claim_lists(open_backend: OpenBackend) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic")
    fake = backend.simulator
    assert fake is not None
    kept = backend.prepare(CLAIM, [alloc("gpu-2-mig-1g10gb-19-0")]).state
    backend.prepare(ClaimRef("ns", "gone", "uid-9"), [alloc("gpu-2-mig-1g10gb-19-1"), alloc("gpu-4-mig-7g80gb-0-0")])
    backend.reconcile([kept])
    assert [(uuid, start) for uuid, _, start in fake.live_instances()] == [(fake.gpus[2].spec.uuid, 0)]


def test_reconcile_in_static_mode_never_destroys(open_backend: OpenBackend) -> None:
    backend = open_backend("dgx-a100-mig")
    fake = backend.simulator
    assert fake is not None
    before = sorted(fake.live_instances())
    backend.reconcile([])
    assert sorted(fake.live_instances()) == before and before


def test_reconcile_never_destroys_instances_it_did_not_create(open_backend: OpenBackend) -> None:
    backend = open_backend("dgx-a100-mig", partitioning="dynamic")
    fake = backend.simulator
    assert fake is not None
    before = sorted(fake.live_instances())
    assert before
    backend.reconcile([])
    assert sorted(fake.live_instances()) == before and fake.destroyed == []


def test_destroy_failure_is_reported(open_backend: OpenBackend) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic")
    fake = backend.simulator
    assert fake is not None
    state = backend.prepare(CLAIM, [alloc("gpu-6-mig-1g10gb-19-3")]).state
    fake.inject_gpu_lost(6)
    with pytest.raises(DeviceError, match="gpu-6-mig-1g10gb-19-3"):
        backend.unprepare(CLAIM, state)
