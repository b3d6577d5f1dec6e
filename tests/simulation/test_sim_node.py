"""The simulated root (dra_driver/simulation/node.py): safe device nodes, shared files built once, removed only when unused."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from dra_driver.simulation.node import NODE_NUMBERS, SimulatedRoot, SimulatedRootError, build_shared, check_root

needs_mknod = pytest.mark.skipif(os.geteuid() != 0, reason="mknod of character nodes needs root (CAP_MKNOD)")


def spec(*host_paths: str) -> dict[str, object]:
    return {"cdiVersion": "0.3.0", "kind": "k8s.gpu.nvidia.com/device",
            "devices": [{"name": "d", "containerEdits": {"deviceNodes": [{"path": "/dev/x", "hostPath": p} for p in host_paths]}}]}  # fmt: skip


@pytest.mark.parametrize("path", ["relative/root", "/var/run/../../dev/sim", "/", "/dev/sim", "/sys/sim", "/proc/sim"])
def test_roots_that_could_reach_real_devices_or_are_not_host_paths_are_refused(path: str) -> None:
    with pytest.raises(SimulatedRootError, match="--simulated-root"):
        check_root(Path(path))


@needs_mknod
def test_device_nodes_are_char_nodes_with_dev_null_numbers(tmp_path: Path) -> None:
    root = SimulatedRoot(tmp_path / "sim")
    try:
        nodes = [str(root.dev_root / "nvidia0"), str(root.dev_root / "nvidia-caps" / "nvidia-cap21")]
        root.make_device_nodes(spec(*nodes))
        root.make_device_nodes(spec(*nodes))  # idempotent: every prepare of every claim names them again
        for node in nodes:
            found = os.lstat(node)
            assert stat.S_ISCHR(found.st_mode) and found.st_rdev == NODE_NUMBERS and stat.S_IMODE(found.st_mode) == 0o666
    finally:
        root.release(tmp_path / "cdi", None)


@needs_mknod
def test_what_is_not_ours_is_refused_and_left_alone(tmp_path: Path) -> None:
    root = SimulatedRoot(tmp_path / "sim")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    try:
        (root.dev_root / "kfd").write_text("a file a user put there\n")
        with pytest.raises(SimulatedRootError, match="not a character node with /dev/null's numbers"):
            root.make_device_nodes(spec(str(root.dev_root / "kfd")))
        assert (root.dev_root / "kfd").read_text() == "a file a user put there\n"
        with pytest.raises(SimulatedRootError, match="outside the simulated root"):
            root.make_device_nodes(spec("/dev/nvidia0"))
        with pytest.raises(SimulatedRootError, match="outside the simulated root"):
            root.make_device_nodes(spec(str(root.dev_root / ".." / "nvidia0")))
        (root.dev_root / "dri").symlink_to(elsewhere)  # a planted link must not steer mknod out of the root
        with pytest.raises(SimulatedRootError, match="cannot make"):
            root.make_device_nodes(spec(str(root.dev_root / "dri" / "renderD128")))
        assert list(elsewhere.iterdir()) == []
    finally:
        root.release(tmp_path / "cdi", None)


def test_shared_directory_is_built_once(tmp_path: Path) -> None:
    built: list[Path] = []

    def build(directory: Path) -> None:
        built.append(directory)
        (directory / "lib").mkdir()
        (directory / "lib" / "libcuda.so.1").write_text("x\n")

    first = build_shared(tmp_path, "nvidia-driver-root-550.54.15", build)
    second = build_shared(tmp_path, "nvidia-driver-root-550.54.15", build)
    assert first == second == tmp_path / "nvidia-driver-root-550.54.15" and len(built) == 1
    assert (first / "lib" / "libcuda.so.1").read_text() == "x\n"
    assert [p.name for p in tmp_path.iterdir()] == ["nvidia-driver-root-550.54.15"], "a temp build dir was left"
    with pytest.raises(SimulatedRootError):
        build_shared(tmp_path, "../escape", build)


def test_kept_while_another_daemon_or_a_prepared_claim_uses_it(tmp_path: Path) -> None:
    cdi, state = tmp_path / "cdi", tmp_path / "state"
    cdi.mkdir()
    old, new = SimulatedRoot(tmp_path / "sim"), SimulatedRoot(tmp_path / "sim")
    driver_root = build_shared(old.path, "nvidia-driver-root-1", lambda d: (d / "f").write_text("x"))
    assert old.release(cdi, state) is False, "removed while the other pod of a rolling update uses it"
    assert driver_root.is_dir()
    (cdi / "k8s.gpu.nvidia.com-device_uid-1.json").write_text(f'{{"mounts": [{{"hostPath": "{driver_root}/f"}}]}}')
    assert new.release(cdi, state) is False, "removed while a prepared claim's spec names it"
    (cdi / "k8s.gpu.nvidia.com-device_uid-1.json").unlink()
    records = state / "gpu.nvidia.com" / "checkpoint.d"
    records.mkdir(parents=True)
    (records / "uid-2.json").write_text("{}")
    assert SimulatedRoot(tmp_path / "sim").release(cdi, state) is False, "removed while the checkpoint holds a claim"
    (records / "uid-2.json").unlink()
    last = SimulatedRoot(tmp_path / "sim")
    assert last.release(cdi, state) is True
    assert [p.name for p in (tmp_path / "sim").iterdir()] == [".lock"]
    again = SimulatedRoot(tmp_path / "sim")  # the next driver pod starts from an empty root
    assert again.dev_root.is_dir()
    again.release(cdi, state)


@needs_mknod
def test_start_up_makes_again_the_nodes_of_specs_already_written(tmp_path: Path) -> None:
    """A node a prepared claim's spec names, removed while no driver ran: the next daemon makes it before serving."""
    import json

    cdi = tmp_path / "cdi"
    cdi.mkdir()
    root = SimulatedRoot(tmp_path / "sim")
    try:
        node = root.dev_root / "nvidia4"
        (cdi / "k8s.gpu.nvidia.com-device_uid-1.json").write_text(json.dumps(spec(str(node))))
        (cdi / "other-vendor.json").write_text(json.dumps(spec("/dev/real-device")))  # not ours: never touched
        (cdi / "broken.json").write_text("{")
        root.make_nodes_of_specs(cdi)
        assert stat.S_ISCHR(os.lstat(node).st_mode)
        assert not Path("/dev/real-device").exists()
    finally:
        root.release(cdi, None)
