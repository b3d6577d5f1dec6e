"""What a dynamic MIG prepare costs in journal writes and NVML calls, and that the savings change no outcome.

Issue #17: an 8-device claim rewrote its ownership journal file twice per instance and read the
compute-instance profiles from NVML on every create and destroy. Now the journal is written once per
claim (the intents; removed once by unprepare), the profiles are read once per (GPU, GI profile) until that
GPU's MIG mode changes, and a GPU instance made by the prepare is not asked for compute instances (issue #31).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest

from dra_driver.common import atomic_file
from dra_driver.common.errors import DeviceError
from dra_driver.backend.interface import AllocatedDevice, ClaimRef
from dra_driver_nvidia import mig
from dra_driver_nvidia.backend import NvidiaBackend
from dra_driver_nvidia.claim_files import ClaimFiles
from dra_driver_nvidia.ownership import SUBDIR, OwnedInstance, OwnershipJournal

from .conftest import OpenBackend
from .nvml_spy import count, intercept

# dgx-h100: seven 1g.10gb placements (GI profile 19) on GPU 0 and one on GPU 1; every GPU starts in MIG mode off.
EIGHT = [f"gpu-0-mig-1g10gb-19-{start}" for start in range(7)] + ["gpu-1-mig-1g10gb-19-0"]
CI_PROFILE_INFO = "nvmlGpuInstanceGetComputeInstanceProfileInfoV"


def claim(uid: str) -> ClaimRef:
    return ClaimRef(namespace="ns", name=uid, uid=uid)


def alloc(*devices: str) -> list[AllocatedDevice]:
    return [AllocatedDevice(request="gpu", pool="node-a", device=device, config=None) for device in devices]


def count_journal_writes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every record file written, in order: created in place (ClaimFiles.create) or replaced (atomic_file.replace_file),
    the only two ways the journal writes."""
    written: list[Path] = []
    create: Callable[..., bool] = ClaimFiles.create
    replace: Callable[..., None] = atomic_file.replace_file

    def creating(files: ClaimFiles[Any], claim_uid: str, body: bytes) -> bool:
        made = create(files, claim_uid, body)
        if made:
            written.append(Path(files.path(claim_uid)))
        return made

    def replacing(path: Path | str, data: bytes, **options: Any) -> None:
        written.append(Path(path))
        replace(path, data, **options)

    monkeypatch.setattr(ClaimFiles, "create", creating)
    monkeypatch.setattr(atomic_file, "replace_file", replacing)
    return written


@pytest.fixture
def backend(open_backend: OpenBackend, tmp_path: Path) -> NvidiaBackend:
    opened = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path)
    opened.discover()
    return opened


def test_eight_instances_cost_one_journal_write(backend: NvidiaBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written = count_journal_writes(monkeypatch)
    prepared = backend.prepare(claim("uid-8"), alloc(*EIGHT))
    assert written == [tmp_path / SUBDIR / "uid-8.json"]  # the intents, before the first create (was: IDs after the last too)
    recorded = OwnershipJournal.under(tmp_path).entries("uid-8")
    by_device = {entry["device"]: entry for entry in prepared.state["migInstances"]}
    # Each intent names its instance's placement; the IDs are in the claim state.
    assert sorted((e.device, e.parent_uuid, e.profile_id, e.start) for e in recorded) == sorted(
        (name, entry["parentUUID"], entry["profileId"], entry["start"]) for name, entry in by_device.items()
    )
    assert [d.device for d in prepared.devices] == EIGHT  # in the claim's order, each with its own UUID
    assert [d.edits.env[-1].split("=", 1)[1] for d in prepared.devices] == [by_device[name]["uuid"] for name in EIGHT]


def test_unprepare_drops_the_journal_file_without_rewriting_it(
    backend: NvidiaBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared = backend.prepare(claim("uid-8"), alloc(*EIGHT))
    written = count_journal_writes(monkeypatch)
    backend.unprepare(claim("uid-8"), prepared.state)
    assert written == []  # was one rewrite per destroyed instance but the last
    assert list((tmp_path / SUBDIR).glob("*")) == [] and list(backend.simulator.live_instances()) == []  # type: ignore[union-attr]


def test_an_unprepare_removes_the_claims_journal_file_once_and_a_whole_gpus_never(
    backend: NvidiaBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The destroy drops the last entries with the file; the unprepare's final drop (for a corrupt record or entries
    on unknown GPUs) knows it is gone. A claim with no journal file (a whole GPU) removes nothing."""
    journal_dir = str(tmp_path / SUBDIR)
    removed: list[str] = []
    unlink = os.unlink

    def spy(path: Any, *args: Any, **kw: Any) -> None:
        if os.fspath(path).startswith(journal_dir):
            removed.append(os.fspath(path))
        unlink(path, *args, **kw)

    prepared = backend.prepare(claim("uid-8"), alloc(*EIGHT))
    whole = backend.prepare(claim("uid-w"), alloc("gpu-3"))
    monkeypatch.setattr(os, "unlink", spy)
    backend.unprepare(claim("uid-8"), prepared.state)
    assert removed == [str(tmp_path / SUBDIR / "uid-8.json")]  # was twice: the second found nothing
    removed.clear()
    backend.unprepare(claim("uid-w"), whole.state)
    assert removed == []
    # A corrupt record is still dropped by the claim's unprepare.
    (tmp_path / SUBDIR / "uid-c.json").write_bytes(b"{")
    backend.unprepare(claim("uid-c"), {})
    assert removed == [str(tmp_path / SUBDIR / "uid-c.json")] and list((tmp_path / SUBDIR).glob("*")) == []


def test_journal_takes_one_claim_per_write(tmp_path: Path) -> None:
    journal = OwnershipJournal.under(tmp_path)
    with pytest.raises(ValueError, match="one claim"):
        journal.record(OwnedInstance("a", "d0", "GPU-0", 19, 0), OwnedInstance("b", "d1", "GPU-0", 19, 1))
    assert journal.all_entries() == []


def test_compute_profiles_read_once_per_gpu_and_gi_profile(backend: NvidiaBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count(monkeypatch, backend.simulator, CI_PROFILE_INFO)  # type: ignore[arg-type]
    first = backend.prepare(claim("uid-a"), alloc(*EIGHT))
    per_gpu_and_profile = pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT
    assert calls[CI_PROFILE_INFO] == 2 * per_gpu_and_profile  # (GPU 0, 1g.10gb) and (GPU 1, 1g.10gb); was 8 x
    backend.unprepare(claim("uid-a"), first.state)
    again = backend.prepare(claim("uid-b"), alloc(*EIGHT))
    backend.unprepare(claim("uid-b"), again.state)
    assert calls[CI_PROFILE_INFO] == 2 * per_gpu_and_profile  # destroying and recreating asked NVML nothing more
    assert list(backend.simulator.live_instances()) == []  # type: ignore[union-attr]


def test_each_placement_is_looked_up_once(backend: NvidiaBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check that no one else's instance is at a placement also tells the creation whether to make a GI."""
    looked_up: list[tuple[int, int]] = []
    real = mig.find_instance

    def spy(handle: Any, profile_id: int, start: int, capacity: int) -> Any:
        looked_up.append((profile_id, start))
        return real(handle, profile_id, start, capacity)

    monkeypatch.setattr(mig, "find_instance", spy)
    backend.prepare(claim("uid-a"), alloc(*EIGHT))
    assert sorted(looked_up) == sorted((19, int(name.rsplit("-", 1)[1])) for name in EIGHT)  # was twice each


def test_a_new_gpu_instance_is_not_asked_for_its_compute_instances(backend: NvidiaBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GI made by this prepare has no CI yet; only a reused GI (idempotent prepare) is asked for the one it holds."""
    calls = count(monkeypatch, backend.simulator, "nvmlGpuInstanceGetComputeInstances")  # type: ignore[arg-type]
    first = backend.prepare(claim("uid-a"), alloc(*EIGHT))
    assert calls["nvmlGpuInstanceGetComputeInstances"] == 0  # was one per instance
    again = backend.prepare(claim("uid-a"), alloc(*EIGHT))  # the kubelet's retry: every GI is there already
    assert calls["nvmlGpuInstanceGetComputeInstances"] == len(EIGHT)  # per reused GI, one call with a buffer (was two)
    assert again.state == first.state  # the same instances, no second CI in any of them
    assert all(len(gi.computes) == 1 for gpu in backend.simulator.gpus for gi in gpu.instances.values())  # type: ignore[union-attr]


def test_compute_profiles_read_again_after_a_mig_mode_switch(backend: NvidiaBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count(monkeypatch, backend.simulator, CI_PROFILE_INFO)  # type: ignore[arg-type]
    mig_claim = backend.prepare(claim("uid-a"), alloc(EIGHT[0]))
    backend.unprepare(claim("uid-a"), mig_claim.state)
    read_once = calls[CI_PROFILE_INFO]
    assert read_once > 0
    whole = backend.prepare(claim("uid-b"), alloc("gpu-0"))  # switches GPU 0's MIG mode off
    backend.unprepare(claim("uid-b"), whole.state)
    backend.prepare(claim("uid-c"), alloc(EIGHT[0]))  # and on again: the profiles are asked for again
    assert calls[CI_PROFILE_INFO] == 2 * read_once


def test_failed_compute_instance_leaves_nothing_behind(
    backend: NvidiaBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The third instance's GI is made and its CI fails: all three placements are free again, nothing is journaled."""
    fake = backend.simulator
    assert fake is not None
    made: list[int] = []

    def third_fails(original: Callable[..., int], *args: Any) -> int:
        made.append(1)
        return pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES if len(made) == 3 else original(*args)

    intercept(monkeypatch, fake, "nvmlGpuInstanceCreateComputeInstance", third_fails)
    devices = [EIGHT[0], EIGHT[1], EIGHT[7]]
    with pytest.raises(DeviceError, match=EIGHT[7]):
        backend.prepare(claim("uid-a"), alloc(*devices))
    assert list(fake.live_instances()) == []  # the GI without a CI too (it used to stay, taken for an admin's)
    assert list((tmp_path / SUBDIR).glob("*")) == []
    published = {device.name: device for device in backend.discover().devices}
    assert all(published[name].consumes_counters for name in devices)  # offered as placements, none as foreign
    monkeypatch.undo()
    retried = backend.prepare(claim("uid-a"), alloc(*devices))
    assert len(retried.state["migInstances"]) == 3


def test_gpu_instance_that_cannot_be_undone_is_left_alone_and_logged(
    backend: NvidiaBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """CI creation fails and so does destroying the GI just made: nothing records it as ours any more, so it counts
    as someone else's (its placement withdrawn) and no later start destroys it by placement; the error says how to
    remove it."""
    fake = backend.simulator
    assert fake is not None
    intercept(monkeypatch, fake, "nvmlGpuInstanceCreateComputeInstance", lambda original, *args: pynvml.NVML_ERROR_UNKNOWN)
    intercept(monkeypatch, fake, "nvmlGpuInstanceDestroy", lambda original, *args: pynvml.NVML_ERROR_UNKNOWN)
    with pytest.raises(DeviceError, match=EIGHT[0]):
        backend.prepare(claim("uid-a"), alloc(EIGHT[0]))
    assert [start for _, _, start in fake.live_instances()] == [0]
    assert "nvidia-smi mig -dci/-dgi" in caplog.text
    assert list((tmp_path / SUBDIR).glob("*")) == []
    monkeypatch.undo()
    restarted = NvidiaBackend(backend.settings, simulator=fake, sysfs_root=backend._sysfs_root, proc_root=None)
    restarted.reconcile([])
    assert [start for _, _, start in fake.live_instances()] == [0]
    offered = {device.name for device in restarted.discover().devices}
    assert EIGHT[0] not in offered and "gpu-0" not in offered and EIGHT[1] in offered


def test_a_prepare_reads_the_claims_journal_file_only_when_one_is_there_and_an_unprepare_once(
    backend: NvidiaBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The removals of an unprepare use what the call read or wrote itself (the claim is held by the call): it reads
    the file once, as a rolling-update peer may have written it. A prepare reads nothing when it creates the file
    (nothing was there to merge with), and merges with what is there when it cannot."""
    read: list[Path] = []
    files = backend._journal._files
    assert files is not None
    real = files._parse

    def spy(path: Path | str, **options: Any) -> Any:
        read.append(Path(path))
        return real(path, **options)

    monkeypatch.setattr(files, "_parse", spy)
    prepared = backend.prepare(claim("uid-8"), alloc(*EIGHT))
    assert read == []  # was one read, of a file that was not there
    backend.unprepare(claim("uid-8"), prepared.state)
    assert read == [tmp_path / SUBDIR / "uid-8.json"]
    assert list((tmp_path / SUBDIR).glob("*")) == [] and list(backend.simulator.live_instances()) == []  # type: ignore[union-attr]
    read.clear()
    OwnershipJournal.under(tmp_path).record(OwnedInstance("uid-x", EIGHT[0], "GPU-x", 19, 0))  # a peer's write
    backend.prepare(claim("uid-x"), alloc(EIGHT[1]))
    assert read == [tmp_path / SUBDIR / "uid-x.json"]  # there already: read and merged
    assert [e.device for e in OwnershipJournal.under(tmp_path).entries("uid-x")] == [EIGHT[0], EIGHT[1]]  # the peer's entry kept


def test_the_mig_uuids_of_a_claim_are_found_in_one_walk_per_gpu(backend: NvidiaBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML finds a MIG device's UUID only by walking the parent's MIG handles: one walk per GPU of the claim,
    not one per instance (seven instances on GPU 0 walked 1 + 2 + ... + 7 handles)."""
    calls = count(monkeypatch, backend.simulator, "nvmlDeviceGetMigDeviceHandleByIndex")  # type: ignore[arg-type]
    prepared = backend.prepare(claim("uid-8"), alloc(*EIGHT))
    assert calls["nvmlDeviceGetMigDeviceHandleByIndex"] <= 7 + 1  # GPU 0's seven MIG devices, GPU 1's one
    uuids = [e.split("=", 1)[1] for d in prepared.devices for e in d.edits.env if e.startswith("NVIDIA_DRA_UUID")]
    assert len(set(uuids)) == 8 and all(u.startswith("MIG-") for u in uuids)
    assert uuids == [entry["uuid"] for entry in prepared.state["migInstances"]]  # each device got its own instance's UUID


def test_a_gpus_mig_device_count_is_read_once(backend: NvidiaBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk for new MIG devices' UUIDs covers the GPU's MIG device slots: their number is the board's, asked once
    per GPU, not once per prepare."""
    calls = count(monkeypatch, backend.simulator, "nvmlDeviceGetMaxMigDeviceCount")  # type: ignore[arg-type]
    for number, device in enumerate(EIGHT[:3]):
        assert backend.prepare(claim(f"uid-{number}"), alloc(device)).state["migInstances"][0]["uuid"].startswith("MIG-")
    assert calls["nvmlDeviceGetMaxMigDeviceCount"] == 1


def test_instances_are_listed_in_one_call_with_a_buffer_for_the_profile(backend: NvidiaBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """nvmlDeviceGetGpuInstances and nvmlGpuInstanceGetComputeInstances take a buffer as large as the profile's
    instanceCount (the simulated library refuses a NULL buffer, as nvml.h's contract has it): one call per lookup,
    not a count query first."""
    calls = count(monkeypatch, backend.simulator, "nvmlDeviceGetGpuInstances", "nvmlGpuInstanceGetComputeInstances")  # type: ignore[arg-type]
    prepared = backend.prepare(claim("uid-1"), alloc(EIGHT[0]))
    assert calls["nvmlDeviceGetGpuInstances"] == 1  # the placement's lookup
    backend.unprepare(claim("uid-1"), prepared.state)
    assert calls["nvmlGpuInstanceGetComputeInstances"] == 1  # the 1g GI's one compute profile, before it is destroyed
    assert list(backend.simulator.live_instances()) == []  # type: ignore[union-attr]
