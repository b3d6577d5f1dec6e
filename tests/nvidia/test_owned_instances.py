"""Ownership of dynamic MIG instances survives a daemon crash (the journal under state_dir/nvidia).

The crash is modelled in process: backend A creates an instance in prepare and is then
dropped without unprepare (the plugin never saved the claim's state); backend B is a fresh
NvidiaBackend over the same simulated NVML library (the GPU state a real driver keeps
across a daemon restart) and the same state dir, as the restarted daemon would build it.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import pytest

from dra_driver.cli.run import add_daemon_arguments
from dra_driver.common.errors import DeviceError
from dra_driver.backend.interface import AllocatedDevice, ClaimRef
from dra_driver_nvidia import mig, nvml
from dra_driver_nvidia.backend import NvidiaBackend
from dra_driver_nvidia.simulated.fake_nvml import FakeNvmlLibrary
from dra_driver_nvidia.ownership import SUBDIR, OwnedInstance, OwnershipJournal

from .conftest import OpenBackend

CLAIM = ClaimRef(namespace="ns", name="claim", uid="uid-1")
OURS = "gpu-0-mig-1g10gb-19-0"  # dgx-h100: GI profile 19 (1g.10gb) at placement start 0 on GPU 0
ADMIN_START = 3  # another 1g.10gb placement on the same GPU


def alloc(device: str) -> AllocatedDevice:
    return AllocatedDevice(request="gpu", pool="node-a", device=device, config=None)


def restarted(crashed: NvidiaBackend) -> NvidiaBackend:
    """The backend a restarted daemon builds: fresh memory, the same GPUs (simulated library) and state dir."""
    assert crashed.simulator is not None
    return NvidiaBackend(crashed.settings, simulator=crashed.simulator, sysfs_root=crashed._sysfs_root, proc_root=None)


def instances(fake: FakeNvmlLibrary | None) -> list[tuple[str, int]]:
    """(GPU uuid, placement start) of every GPU instance now."""
    assert fake is not None
    return sorted((uuid, start) for uuid, _, start in fake.live_instances())


def admin_create(gpu: int, profile_id: int, start: int) -> None:
    """An instance made behind the driver's back (nvidia-smi mig -cgi/-cci), straight on the library."""
    handle = nvml.handle_by_index(gpu)
    if not nvml.mig_mode(handle)[0]:
        nvml.set_mig_mode(handle, True)
    profile = next(p for p in mig.read_profiles(handle) if p.info.id == profile_id)
    placement = next(p for p in profile.placements if p.start == start)
    mig.create_instance(handle, profile, placement)


def record_files(root: Path) -> list[Path]:
    return sorted((root / SUBDIR).glob("*.json"))


@pytest.fixture
def crashed(open_backend: OpenBackend, tmp_path: Path) -> NvidiaBackend:
    """Backend A after prepare created the instance of CLAIM and the daemon died before the state was saved."""
    backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path)
    backend.prepare(CLAIM, [alloc(OURS)])
    assert len(instances(backend.simulator)) == 1
    return backend


def test_reconcile_after_crash_destroys_our_instance_and_keeps_the_admins(crashed: NvidiaBackend, tmp_path: Path) -> None:
    fake = crashed.simulator
    assert fake is not None
    gpu0 = fake.gpus[0].spec.uuid
    admin_create(0, 19, ADMIN_START)
    assert record_files(tmp_path)
    after = restarted(crashed)
    after.reconcile([])  # the checkpoint lists no live claim
    assert instances(fake) == [(gpu0, ADMIN_START)]
    assert record_files(tmp_path) == []
    # The placement is offered and prepares again; the admin's instance stays published as a static MIG device.
    published = {device.name: device for device in after.discover().devices}
    assert published[OURS].consumes_counters  # a placement again, not a foreign static MIG device
    assert not published[f"gpu-0-mig-1g10gb-19-{ADMIN_START}"].consumes_counters
    state = after.prepare(ClaimRef("ns", "again", "uid-2"), [alloc(OURS)]).state
    assert instances(fake) == [(gpu0, 0), (gpu0, ADMIN_START)]
    after.unprepare(ClaimRef("ns", "again", "uid-2"), state)
    assert instances(fake) == [(gpu0, ADMIN_START)] and record_files(tmp_path) == []


def test_reconcile_keeps_instances_live_claims_list(open_backend: OpenBackend, tmp_path: Path) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path)
    live = backend.prepare(CLAIM, [alloc(OURS)]).state
    backend.prepare(ClaimRef("ns", "half", "uid-2"), [alloc("gpu-1-mig-1g10gb-19-0")])
    after = restarted(backend)
    after.reconcile([live])
    fake = backend.simulator
    assert fake is not None
    assert instances(fake) == [(fake.gpus[0].spec.uuid, 0)]
    assert [path.name for path in record_files(tmp_path)] == ["uid-1.json"]
    after.unprepare(CLAIM, live)
    assert instances(fake) == [] and record_files(tmp_path) == []


def test_rollback_with_empty_state_destroys_the_recorded_instance(crashed: NvidiaBackend, tmp_path: Path) -> None:
    fake = crashed.simulator
    assert fake is not None
    admin_create(0, 19, ADMIN_START)
    after = restarted(crashed)
    after.unprepare(CLAIM, {})  # the plugin's rollback of a PrepareStarted record without backend state
    assert instances(fake) == [(fake.gpus[0].spec.uuid, ADMIN_START)]
    assert record_files(tmp_path) == []
    after.unprepare(CLAIM, {})  # repeated rollback: nothing left, nothing else touched
    assert instances(fake) == [(fake.gpus[0].spec.uuid, ADMIN_START)]


def test_only_a_backend_with_a_state_dir_undoes_claims_from_its_own_records(open_backend: OpenBackend, tmp_path: Path) -> None:
    """The plugin skips recording the backend state before the CDI spec only when the journal and the sharing
    records are on disk: without a state dir they die with the process, and the state must be recorded."""
    assert open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path).undoes_from_own_records
    assert not open_backend("dgx-h100", partitioning="dynamic").undoes_from_own_records


def test_crash_between_creation_and_recording_the_ids(open_backend: OpenBackend, tmp_path: Path) -> None:
    """Only the intent reached the disk, but the instance was created: found by GPU, profile and placement."""
    backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path)
    fake = backend.simulator
    assert fake is not None
    OwnershipJournal.under(tmp_path).record(OwnedInstance(CLAIM.uid, OURS, fake.gpus[0].spec.uuid, 19, 0))
    admin_create(0, 19, 0)  # what prepare's create_instance did before the kill
    admin_create(0, 19, ADMIN_START)
    restarted(backend).reconcile([])
    assert instances(fake) == [(fake.gpus[0].spec.uuid, ADMIN_START)]
    assert record_files(tmp_path) == []


def test_intent_without_instance_is_dropped(open_backend: OpenBackend, tmp_path: Path) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path)
    fake = backend.simulator
    assert fake is not None
    OwnershipJournal.under(tmp_path).record(OwnedInstance(CLAIM.uid, OURS, fake.gpus[0].spec.uuid, 19, 0))
    after = restarted(backend)
    after.reconcile([])
    assert record_files(tmp_path) == [] and fake.destroyed == []
    # The placement no longer counts as ours: an instance appearing there later is an admin's.
    admin_create(0, 19, 0)
    with pytest.raises(DeviceError, match="did not create"):
        after.prepare(CLAIM, [alloc(OURS)])


@pytest.mark.parametrize(
    "content",
    [b"", b'{"version": 1, "bootId": "', b"\xff\xfe\x00", b'{"version": 1}', b'["not", "a", "record"]'],
    ids=["empty", "torn", "binary", "missing-fields", "wrong-type"],
)
def test_corrupt_record_is_ignored_and_never_destroys(
    open_backend: OpenBackend, tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path)
    fake = backend.simulator
    assert fake is not None
    admin_create(0, 19, 0)
    (tmp_path / SUBDIR).mkdir(parents=True)
    (tmp_path / SUBDIR / f"{CLAIM.uid}.json").write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="dra_driver_nvidia.ownership"):
        after = restarted(backend)
        after.reconcile([])
        after.unprepare(CLAIM, {})
    assert instances(fake) == [(fake.gpus[0].spec.uuid, 0)] and fake.destroyed == []
    assert any("corrupt" in record.getMessage() for record in caplog.records)


def test_record_of_another_boot_is_void(open_backend: OpenBackend, tmp_path: Path) -> None:
    """MIG instances do not survive a reboot: one at a recorded placement now is someone else's."""
    backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path)
    fake = backend.simulator
    assert fake is not None
    old_boot = tmp_path / "old-boot-id"
    old_boot.write_text("not-this-boot\n")
    OwnershipJournal.under(tmp_path, old_boot).record(OwnedInstance(CLAIM.uid, OURS, fake.gpus[0].spec.uuid, 19, 0))
    admin_create(0, 19, 0)
    restarted(backend).reconcile([])
    assert instances(fake) == [(fake.gpus[0].spec.uuid, 0)] and fake.destroyed == []
    assert record_files(tmp_path) == []


def test_record_holds_the_intent_by_placement(crashed: NvidiaBackend, tmp_path: Path) -> None:
    """The placement names the instance; its IDs go in the claim state the plugin records after prepare."""
    (path,) = record_files(tmp_path)
    body = json.loads(path.read_text())
    assert body["claimUID"] == CLAIM.uid
    (entry,) = body["instances"]
    assert entry["device"] == OURS and entry["profileId"] == 19 and entry["start"] == 0
    assert "giId" not in entry and "ciId" not in entry


def test_claim_rebuilt_from_the_journal_keeps_its_instance(open_backend: OpenBackend, tmp_path: Path) -> None:
    """A prepared claim whose checkpoint record is lost is rebuilt from `recorded_claims`; reconcile gets that state
    (plugin recovery) and must keep the instance a container uses, though the journal names it by placement only."""
    backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path)
    backend.prepare(CLAIM, [alloc(OURS)])
    before = instances(backend.simulator)
    after = restarted(backend)
    (rebuilt,) = after.recorded_claims()
    assert (rebuilt.claim_uid, rebuilt.devices) == (CLAIM.uid, (OURS,))
    after.reconcile([rebuilt.state])
    assert instances(after.simulator) == before and record_files(tmp_path)
    after.unprepare(CLAIM, rebuilt.state)  # the kubelet's unprepare then releases it by its placement
    assert instances(after.simulator) == [] and record_files(tmp_path) == []


def test_prepare_refuses_when_ownership_cannot_be_recorded(open_backend: OpenBackend, tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state dir should be")
    backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=blocker)
    with pytest.raises(DeviceError, match="cannot record MIG instance ownership"):
        backend.prepare(CLAIM, [alloc(OURS)])
    assert instances(backend.simulator) == []


def test_failed_creation_leaves_no_record(open_backend: OpenBackend, tmp_path: Path) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path)
    # 4g.40gb at 0 and 3g.40gb at 0 overlap: the second creation fails and the first is rolled back.
    with pytest.raises(DeviceError):
        backend.prepare(CLAIM, [alloc("gpu-1-mig-4g40gb-5-0"), alloc("gpu-1-mig-3g40gb-9-0")])
    assert instances(backend.simulator) == [] and record_files(tmp_path) == []


def test_without_state_dir_ownership_is_per_process(open_backend: OpenBackend) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic")
    backend.prepare(CLAIM, [alloc(OURS)])
    restarted(backend).reconcile([])
    assert len(instances(backend.simulator)) == 1  # unknown after the restart: left alone as foreign
    backend.unprepare(CLAIM, {})  # the same process still knows it
    assert instances(backend.simulator) == []


def test_run_defaults_state_dir_to_a_runtime_directory(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_daemon_arguments(parser)
    assert parser.parse_args(["--kubelet-dir", str(tmp_path)]).state_dir == Path("/var/run/dra-driver")
    assert parser.parse_args(["--kubelet-dir", str(tmp_path), "--state-dir", "/x"]).state_dir == Path("/x")


@pytest.mark.parametrize("cut", [0, 1, 0.5, -1], ids=["empty", "one-byte", "half", "all-but-the-last-byte"])
def test_an_intent_cut_short_names_nothing_and_never_destroys(
    open_backend: OpenBackend, tmp_path: Path, caplog: pytest.LogCaptureFixture, cut: float
) -> None:
    """A claim's intent is created in place: a kill -9 inside that write leaves a prefix of it. That is a corrupt
    record (as today's damaged ones): the instance it would have named was not created yet, and what is at its
    placement later is nobody's, left alone by rollback and reconcile; the claim's next prepare writes it whole."""
    backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path)
    fake = backend.simulator
    assert fake is not None
    OwnershipJournal.under(tmp_path / "whole").record(OwnedInstance(CLAIM.uid, OURS, fake.gpus[0].spec.uuid, 19, 0))
    whole = record_files(tmp_path / "whole")[0].read_bytes()
    torn = whole[: int(len(whole) * cut) if isinstance(cut, float) else cut]
    (tmp_path / SUBDIR).mkdir(parents=True)
    (tmp_path / SUBDIR / f"{CLAIM.uid}.json").write_bytes(torn)
    admin_create(0, 19, 0)  # appears at the torn intent's placement behind the driver's back
    after = restarted(backend)
    with caplog.at_level(logging.WARNING):
        assert after.recorded_claims() == []
        after.reconcile([])
        retried = after.prepare(CLAIM, [alloc("gpu-0-mig-1g10gb-19-1")])  # the kubelet's retry, another placement
    assert "corrupt" in caplog.text
    assert [e.device for e in OwnershipJournal.under(tmp_path).entries(CLAIM.uid)] == ["gpu-0-mig-1g10gb-19-1"]
    after.unprepare(CLAIM, retried.state)
    assert instances(fake) == [(fake.gpus[0].spec.uuid, 0)]  # the admin's, never destroyed
    assert record_files(tmp_path) == []
