"""Container edits, dynamic mode switching on prepare, restore on unprepare and reconcile."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.common.errors import DeviceError
from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.backend.interface import AllocatedDevice, ClaimRef, DeviceNode

from dra_driver_amd.backend import AmdBackend

CLAIM_A = ClaimRef("default", "a", "uid-a")
CLAIM_B = ClaimRef("default", "b", "uid-b")


def _alloc(*names: str) -> list[AllocatedDevice]:
    return [AllocatedDevice(request="gpu", pool="node-a", device=name) for name in names]


def _paths(prepared_device) -> list[str]:
    return [node.path for node in prepared_device.edits.device_nodes]


def test_whole_gpu_gets_kfd_render_and_card(open_backend):
    backend = open_backend("mi300x")
    prepared = backend.prepare(CLAIM_A, _alloc("gpu-8-136"))
    assert [d.device for d in prepared.devices] == ["gpu-8-136"]
    assert _paths(prepared.devices[0]) == ["/dev/kfd", "/dev/dri/renderD136", "/dev/dri/card8"]
    assert all(node.host_path is None for node in prepared.devices[0].edits.device_nodes)
    assert prepared.state["devices"] == ["gpu-8-136"] and "placements" not in prepared.state
    backend.unprepare(CLAIM_A, prepared.state)  # nothing to undo
    assert backend.library.calls == []


def test_static_partition_uses_its_own_render_node(open_backend):
    backend = open_backend("mi300x-cpx")
    prepared = backend.prepare(CLAIM_A, _alloc("gpu-11-139", "gpu-12-140"))
    assert _paths(prepared.devices[0]) == ["/dev/kfd", "/dev/dri/renderD139", "/dev/dri/card11"]
    assert _paths(prepared.devices[1]) == ["/dev/kfd", "/dev/dri/renderD140", "/dev/dri/card12"]


def test_host_paths_follow_dev_root(open_backend, tmp_path: Path):
    backend = open_backend("mi210", dev_root=tmp_path / "hostdev")
    node = backend.prepare(CLAIM_A, _alloc("gpu-1-128")).devices[0].edits.device_nodes[1]
    assert node == DeviceNode(path="/dev/dri/renderD128", host_path=str(tmp_path / "hostdev/dri/renderD128"), permissions="rw")


def test_unknown_device_fails_with_its_name(open_backend):
    backend = open_backend("mi300x")
    with pytest.raises(DeviceError, match="gpu-99-999"):
        backend.prepare(CLAIM_A, _alloc("gpu-99-999"))


def test_dynamic_prepare_switches_mode_and_unprepare_restores(open_backend):
    backend = open_backend("mi300x", "dynamic")
    backend.discover()
    fake = backend.library
    prepared = backend.prepare(CLAIM_A, _alloc("gpu-8-136-cpx-nps4-3"))
    assert fake.current_mode("0000:26:00.0") == ("CPX", "NPS4")
    # Growing: compute first, then memory (NPS4 needs at least 4 compute partitions).
    assert fake.calls == [("set_compute_partition", "0000:26:00.0", "CPX"), ("set_memory_partition", "0000:26:00.0", "NPS4")]
    assert _paths(prepared.devices[0]) == ["/dev/kfd", "/dev/dri/renderD139", "/dev/dri/card11"]
    assert prepared.state["placements"] == [
        {"device": "gpu-8-136-cpx-nps4-3", "gpu": "0000:26:00.0", "index": 3, "mode": {"compute": "CPX", "memory": "NPS4", "partitions": 8}}
    ]
    # The same claim again is idempotent: no further library calls.
    again = backend.prepare(CLAIM_A, _alloc("gpu-8-136-cpx-nps4-3"))
    assert _paths(again.devices[0]) == _paths(prepared.devices[0]) and len(fake.calls) == 2
    fake.calls.clear()
    backend.unprepare(CLAIM_A, prepared.state)
    assert fake.current_mode("0000:26:00.0") == ("SPX", "NPS1")
    # Shrinking: memory first, then compute.
    assert fake.calls == [("set_memory_partition", "0000:26:00.0", "NPS1"), ("set_compute_partition", "0000:26:00.0", "SPX")]
    backend.unprepare(CLAIM_A, prepared.state)  # idempotent
    assert len(fake.calls) == 2


def test_dynamic_same_mode_claims_share_a_gpu_and_other_modes_are_refused(open_backend):
    backend = open_backend("mi300x", "dynamic")
    backend.discover()
    first = backend.prepare(CLAIM_A, _alloc("gpu-0-128-qpx-nps1-0"))
    second = backend.prepare(CLAIM_B, _alloc("gpu-0-128-qpx-nps1-1"))
    assert _paths(second.devices[0])[1] == "/dev/dri/renderD129"
    with pytest.raises(DeviceError, match="in use in mode qpx_nps1"):
        backend.prepare(ClaimRef("default", "c", "uid-c"), _alloc("gpu-0-128-cpx-nps1-2"))
    backend.unprepare(CLAIM_A, first.state)
    assert backend.library.current_mode("0000:05:00.0") == ("QPX", "NPS1")  # claim b still uses it
    backend.unprepare(CLAIM_B, second.state)
    assert backend.library.current_mode("0000:05:00.0") == ("SPX", "NPS1")


def _refused_memory_mode_change(open_backend):
    """An MI300X whose memory mode change needs a driver reload, after claim a asked for CPX/NPS4 and was refused."""
    section = dict(load_profile("mi300x").sections["amd"])
    section["memory_reload_required"] = True
    backend = open_backend(section=section, partitioning="dynamic")
    backend.discover()
    with pytest.raises(DeviceError, match="driver reload"):
        backend.prepare(CLAIM_A, _alloc("gpu-0-128-cpx-nps4-0"))
    return backend


def test_memory_mode_change_that_needs_a_reload_fails_clearly(open_backend):
    backend = _refused_memory_mode_change(open_backend)
    # A compute-only change needs no reload.
    prepared = backend.prepare(CLAIM_B, _alloc("gpu-8-136-cpx-nps1-7"))
    assert _paths(prepared.devices[0])[1] == "/dev/dri/renderD143"


def test_reconcile_restores_gpus_no_live_claim_needs(open_backend):
    backend = open_backend("mi300x", "dynamic")
    backend.discover()
    kept = backend.prepare(CLAIM_A, _alloc("gpu-0-128-dpx-nps1-1"))
    backend.prepare(CLAIM_B, _alloc("gpu-8-136-cpx-nps1-0"))  # its state is lost (claim gone while we were down)
    restarted = AmdBackend(backend.smi, backend.settings)  # same hardware state, fresh bookkeeping
    restarted.reconcile([kept.state])
    assert restarted.library.current_mode("0000:05:00.0") == ("DPX", "NPS1")
    assert restarted.library.current_mode("0000:26:00.0") == ("SPX", "NPS1")
    # The kept claim's mode is still protected after reconcile.
    with pytest.raises(DeviceError):
        restarted.prepare(CLAIM_B, _alloc("gpu-0-128"))


def test_validate_partitions_after_mode_change_still_valid(open_backend):
    from dra_driver.model import render_pool, validate_slices

    backend = open_backend("mi300x", "dynamic")
    backend.discover()
    backend.prepare(CLAIM_A, _alloc("gpu-0-128-cpx-nps4-0"))
    inventory = backend.discover()  # the GPU is now in CPX; the published set must not change
    assert len(inventory.devices) == 216 and inventory.device("gpu-0-128").capacity["memory"] == "196592Mi"
    validate_slices(render_pool(inventory, "node-a"))


def test_failed_dynamic_prepare_leaves_no_hold_even_with_empty_unprepare_state(open_backend):
    backend = open_backend("mi300x", "dynamic")
    backend.discover()
    fake = backend.library
    # A later device that cannot be found fails the claim before any GPU is switched.
    with pytest.raises(DeviceError, match="no-such-device"):
        backend.prepare(CLAIM_A, _alloc("gpu-0-128-cpx-nps4-0", "no-such-device"))
    assert fake.current_mode("0000:05:00.0") == ("SPX", "NPS1") and fake.calls == []
    # A later device that conflicts fails after the first GPU was switched: prepare rolls it back.
    backend.prepare(CLAIM_B, _alloc("gpu-8-136-qpx-nps1-0"))
    with pytest.raises(DeviceError, match="is in use in mode qpx_nps1 by claim uid-b"):
        backend.prepare(CLAIM_A, _alloc("gpu-0-128-cpx-nps1-0", "gpu-8-136-cpx-nps1-0"))
    assert ("set_compute_partition", "0000:05:00.0", "CPX") in fake.calls  # it was switched ...
    assert fake.current_mode("0000:05:00.0") == ("SPX", "NPS1")  # ... and switched back
    backend.unprepare(CLAIM_A, {})  # what the plugin passes after a failed prepare
    other = backend.prepare(ClaimRef("default", "c", "uid-c"), _alloc("gpu-0-128"))
    assert [d.device for d in other.devices] == ["gpu-0-128"]


def test_unprepare_with_empty_state_releases_the_claims_gpus(open_backend):
    backend = open_backend("mi300x", "dynamic")
    backend.discover()
    backend.prepare(CLAIM_A, _alloc("gpu-0-128-cpx-nps4-0"))
    backend.unprepare(CLAIM_A, {})
    assert backend.library.current_mode("0000:05:00.0") == ("SPX", "NPS1")
    backend.prepare(CLAIM_B, _alloc("gpu-0-128"))


def test_failed_mode_switch_is_rolled_back(open_backend):
    backend = _refused_memory_mode_change(open_backend)
    assert backend.library.current_mode("0000:05:00.0") == ("SPX", "NPS1")
    backend.prepare(CLAIM_B, _alloc("gpu-0-128-dpx-nps1-0"))  # no hold of claim a is left


def test_memory_mode_change_is_refused_while_another_gpu_of_the_hive_is_in_use(open_backend):
    backend = open_backend("mi300x", "dynamic")
    backend.discover()
    backend.prepare(CLAIM_B, _alloc("gpu-8-136-dpx-nps1-1"))  # same hive as gpu-0
    with pytest.raises(DeviceError, match=r"whole XGMI hive.*0000:26:00\.0 \(claim uid-b\)"):
        backend.prepare(CLAIM_A, _alloc("gpu-0-128-cpx-nps4-0"))
    assert backend.library.current_mode("0000:05:00.0") == ("SPX", "NPS1")
    # A compute-only change keeps the hive's memory mode and needs no reload.
    prepared = backend.prepare(CLAIM_A, _alloc("gpu-0-128-cpx-nps1-0"))
    assert backend.library.current_mode("0000:05:00.0") == ("CPX", "NPS1") and prepared.devices


def test_simulated_firmware_refuses_invalid_compute_memory_pairs(open_backend):
    from dra_driver_amd.simulated.fake_amdsmi import AmdSmiComputePartitionType, AmdSmiLibraryException, AmdSmiMemoryPartitionType, FakeHandle

    fake = open_backend("mi300x-cpx").library  # CPX/NPS4
    handle = FakeHandle("0000:05:00.0", 0)
    with pytest.raises(AmdSmiLibraryException):
        fake.amdsmi_set_gpu_compute_partition(handle, AmdSmiComputePartitionType.SPX)  # SPX allows NPS1 only
    assert fake.current_mode("0000:05:00.0") == ("CPX", "NPS4")
    fake.amdsmi_set_gpu_memory_partition(handle, AmdSmiMemoryPartitionType.NPS1)
    fake.amdsmi_set_gpu_compute_partition(handle, AmdSmiComputePartitionType.SPX)
    with pytest.raises(AmdSmiLibraryException):
        fake.amdsmi_set_gpu_memory_partition(FakeHandle("0000:05:00.0", 0), AmdSmiMemoryPartitionType.NPS4)
    assert fake.current_mode("0000:05:00.0") == ("SPX", "NPS1")


def test_memory_step_that_does_not_take_effect_stops_before_the_compute_step(open_backend):
    section = dict(load_profile("mi300x-cpx").sections["amd"])
    section["memory_reload_required"] = True
    backend = open_backend(section=section, partitioning="dynamic")
    backend.discover()
    with pytest.raises(DeviceError, match="driver reload"):
        backend.prepare(CLAIM_A, _alloc("gpu-0-128"))  # CPX/NPS4 -> SPX/NPS1: memory first
    fake = backend.library
    assert fake.current_mode("0000:05:00.0") == ("CPX", "NPS4")  # still a valid pair
    assert not any(call[0] == "set_compute_partition" for call in fake.calls)
