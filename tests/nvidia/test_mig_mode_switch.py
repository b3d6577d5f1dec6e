"""Dynamic partitioning switches a GPU's MIG mode for a claim only while no claim uses the GPU, and says so at info.

dgx-h100 (Hopper: MIG mode switches without a reset; every GPU starts with MIG off). A claim holding the
GPU whole keeps MIG off until it is released, also across a daemon restart (its claim state names it); a
MIG instance on the GPU (any claim's, or an admin's) keeps MIG on.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dra_driver.common.errors import DeviceError
from dra_driver.backend.interface import AllocatedDevice, ClaimRef
from dra_driver_nvidia import nvml

from .conftest import OpenBackend

WHOLE = ClaimRef("ns", "whole", "uid-whole")
SLICE = ClaimRef("ns", "slice", "uid-slice")
GPU = "gpu-2"
PLACEMENT = "gpu-2-mig-1g10gb-19-0"


def alloc(device: str) -> list[AllocatedDevice]:
    return [AllocatedDevice(request="gpu", pool="node-a", device=device, config=None)]


def mig_on() -> bool:
    return bool(nvml.mig_mode(nvml.handle_by_index(2))[0])


def test_mig_is_not_enabled_under_a_claim_using_the_gpu_whole(open_backend: OpenBackend, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path)
    backend.discover()
    whole = backend.prepare(WHOLE, alloc(GPU)).state
    with pytest.raises(DeviceError, match="cannot enable MIG mode: claim uid-whole uses the GPU whole"):
        backend.prepare(SLICE, alloc(PLACEMENT))
    assert not mig_on() and list(backend.simulator.live_instances()) == []  # type: ignore[union-attr]
    # The restarted daemon learns the holder from the claim's state, as recovery passes it to reconcile.
    restarted = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path)
    restarted.reconcile([whole])
    with pytest.raises(DeviceError, match="claim uid-whole uses the GPU whole"):
        restarted.prepare(SLICE, alloc(PLACEMENT))
    restarted.unprepare(WHOLE, whole)
    with caplog.at_level(logging.INFO, logger="dra_driver_nvidia.backend"):
        restarted.prepare(SLICE, alloc(PLACEMENT))
    assert mig_on()
    [switched] = [r for r in caplog.records if r.getMessage() == "switched MIG mode for a claim"]
    assert switched.levelno == logging.INFO  # normal operation in dynamic partitioning, not a warning


def test_mig_is_not_disabled_under_a_mig_instance(open_backend: OpenBackend, tmp_path: Path) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path)
    backend.discover()
    sliced = backend.prepare(SLICE, alloc(PLACEMENT)).state
    before = sorted(backend.simulator.live_instances())  # type: ignore[union-attr]
    with pytest.raises(DeviceError, match=r"cannot disable MIG mode: MIG instances \[\d+\] exist on it"):
        backend.prepare(WHOLE, alloc(GPU))
    assert mig_on() and sorted(backend.simulator.live_instances()) == before  # type: ignore[union-attr]
    backend.unprepare(SLICE, sliced)
    backend.prepare(WHOLE, alloc(GPU))  # nothing on the GPU any more: MIG goes off for the whole-GPU claim
    assert not mig_on()


def test_a_failed_prepare_holds_no_gpu(open_backend: OpenBackend, tmp_path: Path) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path)
    backend.discover()
    with pytest.raises(DeviceError):
        backend.prepare(WHOLE, alloc(GPU) + alloc("gpu-99"))  # the second device does not exist
    backend.prepare(SLICE, alloc(PLACEMENT))  # the whole-GPU hold of the failed claim was dropped
    assert mig_on()
