"""Dynamic MIG respects the GPU's current MIG state (dgx-a100-mig: A100s switch MIG mode only at a reset).

GPUs 0-2 are in MIG mode with admin-created instances, GPU 3 is in MIG mode and empty,
GPUs 4-7 have MIG off.
"""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from dra_driver.common.errors import DeviceError
from dra_driver.model import render_pool, validate_slices
from dra_driver.backend.interface import ClaimRef
from dra_driver_nvidia.backend import NvidiaBackend

from .conftest import OpenBackend, profile_section
from .test_prepare import CLAIM, alloc


def _names(backend: NvidiaBackend, minor: int) -> set[str]:
    return {d.name for d in backend.discover().devices if d.attributes["minor"] == minor}


@pytest.fixture
def a100(open_backend: OpenBackend) -> NvidiaBackend:
    return open_backend("dgx-a100-mig", partitioning="dynamic")


def test_gpu_with_admin_instances_is_not_offered_whole_and_keeps_them(a100: NvidiaBackend) -> None:
    section = profile_section("dgx-a100-mig")
    inventory = a100.discover()
    gpu0 = {d.name: d for d in inventory.devices if d.attributes["minor"] == 0}
    assert "gpu-0" not in gpu0
    admin = {m["uuid"] for m in section["gpus"][0]["migDevices"]}
    # The seven admin 1g.5gb devices are published as they are (static: uuid, no counters) ...
    assert {d.attributes.get("uuid") for d in gpu0.values()} == admin
    assert all(not d.consumes_counters for d in gpu0.values())
    # ... and their memory slices are not in the counter set, so no placement can count on them.
    counters = {cs.name: cs for cs in inventory.counter_sets}["gpu-0-counter-set"].counters
    assert [k for k in counters if k.startswith("memory-slice-")] == ["memory-slice-7"]
    validate_slices(render_pool(inventory, node_name="node-a"))


def test_reviewer_repro_nothing_taken_over_or_destroyed(a100: NvidiaBackend) -> None:
    fake = a100.simulator
    assert fake is not None
    before = sorted(fake.live_instances())
    a100.discover()
    for device in ("gpu-0", "gpu-0-mig-3g20gb-9-0"):
        with pytest.raises(DeviceError, match="is not a device of this node"):
            a100.prepare(CLAIM, [alloc(device)])
    # The name of the admin's own 1g.5gb device gives that device, as static MIG: no state, nothing to destroy.
    prepared = a100.prepare(CLAIM, [alloc("gpu-0-mig-1g5gb-19-0")])
    assert prepared.state == {"migInstances": []}
    assert prepared.devices[0].edits.env == ["NVIDIA_DRA_UUID_GPU_0_MIG_1G5GB_19_0=MIG-ec33f619-8b19-54da-8f59-d2d51a075fa3"]
    a100.unprepare(CLAIM, prepared.state)
    a100.reconcile([])
    assert sorted(fake.live_instances()) == before and fake.destroyed == []


def test_mig_off_a100_is_whole_only_and_mode_untouched(a100: NvidiaBackend) -> None:
    fake = a100.simulator
    assert fake is not None
    assert _names(a100, 4) == {"gpu-4"}
    assert "gpu-4-counter-set" not in {cs.name for cs in a100.discover().counter_sets}
    a100.prepare(CLAIM, [alloc("gpu-4")])
    assert (fake.gpus[4].mig_mode, fake.gpus[4].mig_pending) == (0, 0)


def test_mig_on_empty_a100_offers_placements_only(a100: NvidiaBackend) -> None:
    fake = a100.simulator
    assert fake is not None
    names = _names(a100, 3)
    model = next(iter(profile_section("dgx-a100-mig")["models"].values()))
    placements = sum(len(p["placements"]["starts"]) for p in model["mig"]["gpuInstanceProfiles"])
    assert "gpu-3" not in names and "gpu-3-mig-7g40gb-0-0" in names and len(names) == placements
    prepared = a100.prepare(CLAIM, [alloc("gpu-3-mig-3g20gb-9-4")])
    assert [(e["device"], e["start"]) for e in prepared.state["migInstances"]] == [("gpu-3-mig-3g20gb-9-4", 4)]
    a100.unprepare(CLAIM, prepared.state)
    assert not [i for i in fake.live_instances() if i[0] == fake.gpus[3].spec.uuid]


def test_instance_created_behind_our_back_is_never_adopted(a100: NvidiaBackend) -> None:
    fake = a100.simulator
    assert fake is not None
    a100.discover()
    # An admin creates a 1g.5gb at placement 0 on GPU 3 after our discovery published it as free.
    handle = pynvml.nvmlDeviceGetHandleByIndex(3)
    placement = pynvml.c_nvmlGpuInstancePlacement_t()
    placement.start, placement.size = 0, 1
    gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, 19, ctypes.byref(placement))
    pynvml.nvmlGpuInstanceCreateComputeInstance(gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE)
    with pytest.raises(DeviceError, match="did not create"):
        a100.prepare(CLAIM, [alloc("gpu-3-mig-1g5gb-19-0")])
    assert len([i for i in fake.live_instances() if i[0] == fake.gpus[3].spec.uuid]) == 1
    # The next discovery treats it as the admin's: published as is, its placement withdrawn.
    names = _names(a100, 3)
    assert "gpu-3-mig-1g5gb-19-0" in names and "gpu-3-mig-7g40gb-0-0" not in names


def test_claim_states_prove_ownership_after_restart(open_backend: OpenBackend) -> None:
    first = open_backend("dgx-a100-mig", partitioning="dynamic")
    state = first.prepare(CLAIM, [alloc("gpu-3-mig-4g20gb-5-0")]).state
    section = profile_section("dgx-a100-mig")
    section["gpus"][3]["migDevices"] = [{"profileId": 5, "start": 0, "uuid": state["migInstances"][0]["uuid"]}]
    restarted = open_backend(section, partitioning="dynamic")  # the instance survived a plugin restart
    assert "gpu-3-mig-4g20gb-5-0" in _names(restarted, 3)  # published as existing until proven ours
    assert "gpu-3-mig-3g20gb-9-4" in _names(restarted, 3)
    restarted.reconcile([state])
    assert restarted.simulator is not None and restarted.simulator.destroyed == []
    restarted.unprepare(CLAIM, state)  # ours: destroyed on unprepare
    assert restarted.simulator.destroyed


def test_fake_models_reset_required_mig_mode_change(a100: NvidiaBackend) -> None:
    handle = pynvml.nvmlDeviceGetHandleByIndex(4)
    assert pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE) == pynvml.NVML_ERROR_RESET_REQUIRED
    assert pynvml.nvmlDeviceGetMigMode(handle) == [0, 1]  # pending until reset
    placement = pynvml.c_nvmlGpuInstancePlacement_t()
    placement.start, placement.size = 0, 8
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, 0, ctypes.byref(placement))
    assert a100.simulator is not None
    a100.simulator.reset_gpu(4)
    assert pynvml.nvmlDeviceGetMigMode(handle) == [1, 1]
    # Pending state is read by discovery: a GPU with a change pending is published in its current mode.


def test_pending_mode_change_publishes_current_mode(a100: NvidiaBackend) -> None:
    pynvml.nvmlDeviceSetMigMode(pynvml.nvmlDeviceGetHandleByIndex(3), pynvml.NVML_DEVICE_MIG_DISABLE)
    names = _names(a100, 3)
    assert "gpu-3" not in names and "gpu-3-mig-1g5gb-19-0" in names


def test_switch_that_needs_a_reset_is_refused_and_withdrawn(open_backend: OpenBackend) -> None:
    # A Hopper board that (unusually, e.g. in a VM) answers RESET_REQUIRED: learnt at prepare time.
    section = profile_section("dgx-h100")
    for model in section["models"].values():
        model["migModeNeedsReset"] = True
    backend = open_backend(section, partitioning="dynamic")
    fake = backend.simulator
    assert fake is not None
    assert "gpu-0-mig-1g10gb-19-0" in _names(backend, 0)
    with pytest.raises(DeviceError, match="without a GPU reset.*NVML_ERROR_RESET_REQUIRED"):
        backend.prepare(CLAIM, [alloc("gpu-0-mig-1g10gb-19-0")])
    assert (fake.gpus[0].mig_mode, fake.gpus[0].mig_pending) == (0, 0)  # nothing left pending
    assert _names(backend, 0) == {"gpu-0"}  # now published in its current mode only
    backend.prepare(ClaimRef("ns", "whole", "uid-w"), [alloc("gpu-0")])
