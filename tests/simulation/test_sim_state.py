"""The simulated GPUs' state outlives the process that changed it, is shared by two processes of one node, and
is what a reboot (or another profile) would leave; a damaged or unwritable state never breaks the simulation.

Each "process" is a FakeNvmlLibrary of its own over one SimulatedState path (what two daemons, or a daemon and
its restarted successor, each build from the same profile and state dir).
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.simulation.state import SimulatedState, profile_digest
from tests.hostile_paths import HOSTILE, plant, returns_within

fake_nvml = pytest.importorskip("dra_driver_nvidia.simulated.fake_nvml")
from dra_driver_nvidia import mig, nvml  # noqa: E402
from dra_driver_nvidia.profile import parse_section  # noqa: E402


def section(name: str) -> dict[str, Any]:
    return copy.deepcopy(dict(load_profile(name).sections["nvidia"]))


@pytest.fixture
def library(tmp_path: Path) -> Iterator[Any]:
    """library(profile, boot=...): a new simulated library over tmp_path's state, installed and initialised."""
    opened: list[Any] = []

    def _open(profile: str | dict[str, Any] = "dgx-h100", boot: str = "boot-1", state_dir: Path = tmp_path) -> Any:
        data = section(profile) if isinstance(profile, str) else profile
        lib = fake_nvml.FakeNvmlLibrary(parse_section(data), SimulatedState(state_dir, "nvidia", profile_digest(data), boot_id=boot))
        fake_nvml.install(lib)
        nvml.init()
        opened.append(lib)
        return lib

    yield _open
    for lib in opened:
        lib.close()
    fake_nvml.install(None)


def create_1g(gpu: int, start: int) -> int:
    """A 1g.10gb MIG device at `start` on GPU `gpu` (MIG switched on first); its GI ID."""
    handle = nvml.handle_by_index(gpu)
    if not nvml.mig_mode(handle)[0]:
        nvml.set_mig_mode(handle, True)
    profile = next(p for p in mig.read_profiles(handle) if p.info.id == 19)
    return mig.create_instance(handle, profile, next(p for p in profile.placements if p.start == start)).gi_id


def state_of(lib: Any) -> list[tuple[int, int, list[tuple[int, int, list[str]]]]]:
    """(MIG mode, pending, [(GI id, start, [MIG UUIDs])]) per GPU, as the next NVML call on `lib` sees it."""
    list(lib.live_instances())  # a call: reads what another process saved
    return [
        (g.mig_mode, g.mig_pending, sorted((gi.id, gi.start, sorted(ci.uuid for ci in gi.computes.values())) for gi in g.instances.values()))
        for g in lib.gpus
    ]


def test_a_restarted_process_meets_the_modes_and_instances_the_killed_one_left(library: Any) -> None:
    first = library()
    gi = create_1g(0, 2)
    left = state_of(first)
    assert left[0][0] == 1 and [i[0] for i in left[0][2]] == [gi]
    second = library()  # kill -9 of the first: nothing of it is closed; the GPUs keep what it made
    assert state_of(second) == left
    # The second process destroys it; the first (a rolling-update peer) sees that at its next call.
    assert mig.destroy_instance(nvml.handle_by_index(0), gi, 19, 2)
    assert state_of(first) == state_of(second) and state_of(first)[0][2] == []


def test_peers_see_each_others_every_change_and_read_the_file_only_then(library: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two live processes taking turns: each save (a rename over the file the other holds) is seen at the other's next
    call, whichever saved last; calls with no change since read nothing (the check is an fstat of the held file)."""
    from dra_driver.common import node_file

    reads: list[Path] = []
    read_fd = node_file.read_fd
    monkeypatch.setattr(node_file, "read_fd", lambda fd, path, *rest: (reads.append(path), read_fd(fd, path, *rest))[1])
    first, second = library(), library()
    for start, (maker, peer) in enumerate([(first, second), (second, first), (first, second), (first, second)]):
        fake_nvml.install(maker)
        create_1g(0, start)
        assert state_of(peer) == state_of(maker), f"change {start}"
    seen = len(reads)
    assert state_of(first) == state_of(second) and [len(gpu[2]) for gpu in state_of(first)][0] == 4
    assert len(reads) == seen  # nothing changed since: not read again


def test_changes_are_appended_to_the_file_written_last_and_the_file_is_written_anew_past_the_limit(
    library: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change is one line appended (no new file per simulated NVML call); past the size limit the file is written
    anew as one line. Whatever the file holds, a restarted process meets the latest state."""
    from dra_driver.simulation import state as sim_state

    path = tmp_path / "simulated-hardware" / "nvidia.json"
    first = library()
    create_1g(0, 0)  # MIG mode, GI, CI: three changes, the first writes the file anew (nothing of ours held yet)
    inode, lines = path.stat().st_ino, path.read_bytes().count(b"\n")
    assert lines == 3
    create_1g(0, 1)
    assert path.stat().st_ino == inode and path.read_bytes().count(b"\n") == lines + 2  # GI and CI appended
    assert state_of(library()) == state_of(first)
    fake_nvml.install(first)
    monkeypatch.setattr(sim_state, "_COMPACT_BYTES", path.stat().st_size + 10)  # the next line does not fit
    create_1g(0, 2)
    assert path.stat().st_ino != inode and path.read_bytes().count(b"\n") == 2  # GI: anew; CI: appended again
    assert state_of(library()) == state_of(first) and len(state_of(first)[0][2]) == 3


def test_a_change_appends_only_the_gpu_it_changed(library: Any, tmp_path: Path) -> None:
    """A save encodes the parts that changed, not the node: with dozens of MIG instances live, writing every GPU per
    simulated NVML call cost a dynamic prepare ~0.09 ms (docs/performance.md). A restart replays the changes."""
    path = tmp_path / "simulated-hardware" / "nvidia.json"
    first = library()
    create_1g(0, 0)
    create_1g(1, 0)
    last = json.loads(path.read_bytes().rsplit(b"\n", 1)[1])
    assert list(last) == ["patch"] and list(last["patch"]["gpus"]) == [first.gpus[1].spec.uuid]
    assert state_of(library()) == state_of(first) and [len(gpu[2]) for gpu in state_of(first)][:3] == [1, 1, 0]


def test_what_is_saved_after_every_kind_of_change_is_the_whole_hardware(library: Any, tmp_path: Path) -> None:
    """The library exports anew only the GPUs a change looked a handle up on: after each changing call (MIG mode,
    GPU and compute instances created and destroyed, compute mode, a reset) the file says what the GPUs are."""
    from dra_driver.simulation.state import current_document

    path = tmp_path / "simulated-hardware" / "nvidia.json"
    lib = library()

    def saved_is_current() -> bool:
        fresh = {"serial": lib._serial, "gpus": {gpu.spec.uuid: fake_nvml._gpu_part(gpu) for gpu in lib.gpus}}
        return bool(current_document(path.read_bytes(), path)["hardware"] == fresh)

    handle = nvml.handle_by_index(1)
    steps: list[Any] = [
        lambda: nvml.set_mig_mode(handle, True),
        lambda: create_1g(1, 0),
        lambda: create_1g(1, 3),
        lambda: nvml.set_compute_mode(nvml.handle_by_index(4), nvml.COMPUTE_MODE_EXCLUSIVE_PROCESS),
        lambda: mig.destroy_gpu_instance_tree(mig.find_instance(handle, 19, 0), 19),
        lambda: create_1g(2, 1),
        lambda: lib.reset_gpu(2),
    ]
    for step in steps:
        step()
        assert saved_is_current()
    assert [len(gpu[2]) for gpu in state_of(library())][:3] == [0, 1, 0]


def test_a_part_gone_writes_the_whole_document_and_a_save_of_nothing_new_writes_nothing(tmp_path: Path) -> None:
    from pydantic import BaseModel

    class Hardware(BaseModel):
        serial: int
        gpus: dict[str, int]

    state = SimulatedState(tmp_path, "test", "digest", boot_id="boot-1")
    saves = [{"serial": 1, "gpus": {"a": 1, "b": 2}}, {"serial": 1, "gpus": {"a": 1, "b": 3}}, {"serial": 2, "gpus": {"a": 1}}]
    kinds = []
    for hardware in saves:
        with state.locked():
            state.save(hardware)
        kinds.append(sorted(json.loads(state.path.read_bytes().rsplit(b"\n", 1)[1])))
    assert kinds == [["boot", "hardware", "profile", "version"], ["patch"], ["boot", "hardware", "profile", "version"]]
    size = state.path.stat().st_size
    with state.locked():
        state.save({"serial": 2, "gpus": {"a": 1}})
    assert state.path.stat().st_size == size
    state.close()
    loaded = SimulatedState(tmp_path, "test", "digest", boot_id="boot-1").load(Hardware)
    assert loaded is not None and loaded.hardware == Hardware(serial=2, gpus={"a": 1})


def test_an_append_that_fails_writes_the_file_anew(library: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    path = tmp_path / "simulated-hardware" / "nvidia.json"
    first = library()
    create_1g(0, 0)
    inode = path.stat().st_ino
    real_write, failures = os.write, [OSError(28, "No space left on device")]

    def write_once_failing(fd: int, data: Any) -> int:
        if failures:  # the append: half of it lands, then the disk is full
            real_write(fd, bytes(data)[: len(data) // 2])
            raise failures.pop()
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write_once_failing)
    create_1g(0, 1)
    monkeypatch.undo()
    assert failures == [] and path.stat().st_ino != inode  # written anew after the failed append
    assert state_of(library()) == state_of(first) and len(state_of(first)[0][2]) == 2


def test_a_change_cut_short_by_a_kill_leaves_the_state_before_it(library: Any, tmp_path: Path) -> None:
    path = tmp_path / "simulated-hardware" / "nvidia.json"
    library()
    create_1g(0, 0)
    before = state_of(library())
    whole = path.read_bytes()
    with path.open("ab") as state_file:  # a kill -9 inside the next save's write: half a line
        state_file.write(whole[whole.rindex(b"\n") : whole.rindex(b"\n") + 40])
    assert state_of(library()) == before
    path.write_bytes(b"\n" + b"{" * 30)  # nothing before a damaged line: damage, the profile is used
    assert all(gpu[2] == [] for gpu in state_of(library()))


def test_a_compute_mode_outlives_a_restart_but_not_a_reboot(library: Any) -> None:
    """What an MPS claim set (EXCLUSIVE_PROCESS) is what the restarted daemon finds, as on a real GPU."""
    library()
    nvml.set_compute_mode(nvml.handle_by_index(3), nvml.COMPUTE_MODE_EXCLUSIVE_PROCESS)
    library()  # kill -9 and restart: the same boot
    assert nvml.compute_mode(nvml.handle_by_index(3)) == nvml.COMPUTE_MODE_EXCLUSIVE_PROCESS
    assert nvml.compute_mode(nvml.handle_by_index(2)) == nvml.COMPUTE_MODE_DEFAULT
    library(boot="boot-2")
    assert nvml.compute_mode(nvml.handle_by_index(3)) == nvml.COMPUTE_MODE_DEFAULT


def test_new_mig_uuids_stay_unique_across_processes(library: Any) -> None:
    library()
    create_1g(0, 0)
    library()
    create_1g(0, 1)
    uuids = [u for gi in state_of(library())[0][2] for u in gi[2]]
    assert len(uuids) == len(set(uuids)) == 2


def test_a_reboot_voids_instances_and_makes_the_pending_mode_current(library: Any) -> None:
    library("dgx-a100-mig")
    handle = nvml.handle_by_index(6)  # an A100 with MIG off: enabling it is only pending until a reset
    nvml.set_mig_mode(handle, True)
    assert nvml.mig_mode(handle) == (0, 1)
    same_boot = state_of(library("dgx-a100-mig"))
    assert same_boot[6][:2] == (0, 1) and any(gpu[2] for gpu in same_boot)  # the profile's MIG devices
    rebooted = state_of(library("dgx-a100-mig", boot="boot-2"))
    assert rebooted[6][:2] == (1, 1) and all(gpu[2] == [] for gpu in rebooted)


def test_state_of_another_profile_or_damaged_state_is_not_taken(library: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    library()
    create_1g(0, 0)
    other = section("dgx-h100")
    other["driverVersion"] = "999.1.1"  # another node's hardware, or an edited profile
    assert all(gpu[2] == [] and gpu[0] == 0 for gpu in state_of(library(other)))
    for damaged in (b"\x00not json", b"[" * 200_000 + b"]" * 200_000):  # the second nests past json's recursion limit
        (tmp_path / "simulated-hardware" / "nvidia.json").write_bytes(damaged)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert all(gpu[2] == [] for gpu in state_of(library()))
        assert "simulated hardware state unreadable" in caplog.text


def test_an_unwritable_state_dir_keeps_the_state_in_the_process(library: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with caplog.at_level(logging.WARNING):
        lib = library(state_dir=blocker)
        gi = create_1g(0, 0)
    assert [i[0] for i in state_of(lib)[0][2]] == [gi]
    assert caplog.text.count("cannot keep the simulated hardware state") == 1


def _document(lib_section: dict[str, Any], hardware: Any, boot: str = "boot-1") -> bytes:
    return json.dumps({"version": 1, "profile": profile_digest(lib_section), "boot": boot, "hardware": hardware}).encode()


@pytest.mark.parametrize(
    "hardware",
    [
        {"serial": "7", "gpus": {}},
        {"gpus": ["not", "a", "map"]},
        {"gpus": {"GPU-x": {"migMode": "on", "migPending": 1, "instances": []}}},
        {"gpus": {"GPU-x": {"migMode": 1, "migPending": 1, "instances": [{"id": "1", "profileId": 19, "start": 0, "computes": []}]}}},
        {
            "gpus": {
                "GPU-x": {
                    "migMode": 1,
                    "migPending": 1,
                    "instances": [{"id": 1, "profileId": 19, "start": 0, "computes": [{"id": 0, "profileId": None, "uuid": 5}]}],
                }
            }
        },
    ],
    ids=["serial-string", "gpus-list", "mig-mode-string", "gi-id-string", "compute-fields"],
)
def test_a_valid_header_with_wrong_field_types_is_logged_and_ignored(
    library: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, hardware: dict[str, Any]
) -> None:
    """Damage past the header (the version, profile and boot are right) is damage like any other: the library
    starts from the profile, it does not raise a TypeError out of every restart."""
    data = section("dgx-h100")
    uuid = parse_section(data).gpus[0].uuid
    text = json.dumps(hardware).replace("GPU-x", uuid)
    (tmp_path / "simulated-hardware").mkdir()
    (tmp_path / "simulated-hardware" / "nvidia.json").write_bytes(_document(data, json.loads(text)))
    with caplog.at_level(logging.WARNING):
        lib = library(data)
        state = state_of(lib)
    assert all(gpu[0] == 0 and gpu[2] == [] for gpu in state)
    errors = [r.fields["error"] for r in caplog.records if "simulated hardware state unreadable" in r.getMessage()]
    assert errors and errors[0].startswith("hardware.")


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_pipe_or_link_at_the_state_file_is_refused_without_waiting(
    library: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    path = tmp_path / "simulated-hardware" / "nvidia.json"
    plant(path, kind)
    with caplog.at_level(logging.WARNING):
        state = returns_within(lambda: state_of(library()), path)
    assert all(gpu[2] == [] for gpu in state)
    errors = [r.fields["error"] for r in caplog.records if "simulated hardware state unreadable" in r.getMessage()]
    assert errors and str(path) in errors[0] and ("named pipe" in errors[0] or "symlink" in errors[0])
