"""CDI spec rendering/versions/atomic files, and the checkpoint's checksum, boot ID and corruption handling."""

from __future__ import annotations

import json
from pathlib import Path

from dra_driver.node import cdi
from dra_driver.node.checkpoint import PREPARE_COMPLETED, PREPARE_STARTED, Checkpoint, CheckpointDevice, ClaimRecord
from dra_driver.backend.interface import ContainerEdits, DeviceNode, Mount


def spec_for(name: str, edits: ContainerEdits, claim_edits: ContainerEdits | None = None) -> dict:
    return cdi.build_claim_spec("gpu.nvidia.com", [cdi.SpecDevice(name, "gpu-0", edits)], claim_edits or ContainerEdits())


def test_minimum_versions():
    assert spec_for("a-gpu-0", ContainerEdits(env=["A=1"]))["cdiVersion"] == "0.3.0"
    assert spec_for("a-gpu-0", ContainerEdits(mounts=[Mount("/h", "/c", type="bind")]))["cdiVersion"] == "0.4.0"
    assert spec_for("a-gpu-0", ContainerEdits(device_nodes=[DeviceNode("/dev/nvidia0", host_path="/host/dev/nvidia0")]))["cdiVersion"] == "0.5.0"
    assert spec_for("a-gpu-0", ContainerEdits(device_nodes=[DeviceNode("/dev/nvidia0")]))["cdiVersion"] == "0.3.0"
    assert spec_for("1f2e-gpu-0", ContainerEdits(env=["A=1"]))["cdiVersion"] == "0.5.0"  # UID names may start with a digit
    spec = spec_for("a-gpu-0", ContainerEdits(env=["A=1"]))
    spec["annotations"] = {"x": "y"}
    assert cdi.minimum_version(spec) == "0.6.0"
    spec = spec_for("a", ContainerEdits(env=["A=1"]))
    spec["containerEdits"] = {"netDevices": [{"hostInterfaceName": "eth1", "name": "net1"}]}
    assert cdi.minimum_version(spec) == "1.1.0"


def test_kind_names_and_empty_device_edits():
    spec = spec_for("u-gpu-0", ContainerEdits(), ContainerEdits(env=["ALL=1"]))
    assert spec["kind"] == "k8s.gpu.nvidia.com/device"
    assert spec["devices"][0]["containerEdits"]["env"] == ["DRA_GPU_NVIDIA_COM_DEVICE_GPU_0=gpu-0"]  # CDI needs non-empty edits
    assert spec["containerEdits"] == {"env": ["ALL=1"]}
    assert cdi.qualified_id("gpu.nvidia.com", "u-gpu-0") == "k8s.gpu.nvidia.com/device=u-gpu-0"


def test_atomic_write_and_ownership(tmp_path: Path):
    path = Path(cdi.spec_path(tmp_path / "cdi", "gpu.nvidia.com", "uid-1"))
    cdi.write_spec_atomic(path, {"cdiVersion": "0.3.0"})
    cdi.write_spec_atomic(path, {"cdiVersion": "0.5.0"})
    assert json.loads(path.read_text()) == {"cdiVersion": "0.5.0"}
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temp files left
    (path.parent / "k8s.amd.com-device_uid-2.json").write_text("{}")
    (path.parent / "other.json").write_text("{}")
    assert cdi.our_spec_files(path.parent, "gpu.nvidia.com") == {"uid-1": path}
    Path(cdi.claim_file_path(path.parent, "gpu.nvidia.com", "uid-3")).write_text("{}")  # a claim file whose spec is gone
    (path.parent / "k8s.gpu.nvidia.com-device_bad uid!.json").write_text("{}")  # no claim UID: never ours
    assert cdi.claims_on_disk(path.parent, "gpu.nvidia.com") == {"uid-1", "uid-3"}
    assert cdi.claims_on_disk(path.parent / "missing", "gpu.nvidia.com") == set()
    assert cdi.remove_spec(path) and not cdi.remove_spec(path)


def record(uid: str, phase=PREPARE_COMPLETED) -> ClaimRecord:
    return ClaimRecord(uid, "ns", "c", phase, [CheckpointDevice("gpu", "pool", "gpu-0", cdi_ids=["k/c=x"])], {"mig": [1, 2]})


def test_checkpoint_round_trip(tmp_path: Path):
    boot = tmp_path / "boot"
    boot.write_text("b1\n")
    ckpt = Checkpoint(tmp_path / "cp.json", boot)
    ckpt.put(record("u1"))
    ckpt.put(record("u2", PREPARE_STARTED))
    ckpt.remove("u2")
    again = Checkpoint(tmp_path / "cp.json", boot)
    again.load()
    assert [r.uid for r in again.records()] == ["u1"]
    assert again.get("u1") == record("u1")


def test_checkpoint_from_other_boot_is_void(tmp_path: Path):
    boot = tmp_path / "boot"
    boot.write_text("b1")
    Checkpoint(tmp_path / "cp.json", boot).put(record("u1"))
    boot.write_text("b2")
    fresh = Checkpoint(tmp_path / "cp.json", boot)
    fresh.load()
    assert fresh.records() == []


def test_corrupt_record_is_moved_aside_and_the_others_survive(tmp_path: Path, caplog):
    boot = tmp_path / "boot"
    boot.write_text("b1")
    path = tmp_path / "cp"
    writer = Checkpoint(path, boot)
    writer.put(record("u1"))
    writer.put(record("u2"))
    doc = json.loads((path / "u1.json").read_text())
    doc["body"]["record"]["devices"][0]["device"] = "gpu-9"  # tampered: checksum no longer matches
    (path / "u1.json").write_text(json.dumps(doc))
    ckpt = Checkpoint(path, boot)
    ckpt.load()
    assert [r.uid for r in ckpt.records()] == ["u2"]
    assert sorted(p.name.split(".corrupt-")[0] for p in path.iterdir()) == ["u1.json", "u2.json"]
    assert not (path / "u1.json").exists() and len(list(path.glob("u1.json.corrupt-*"))) == 1
    assert "checksum mismatch" in caplog.text
    (path / "u2.json").write_text("{not json")
    ckpt.load()
    assert ckpt.records() == []

def test_concurrent_puts_are_all_on_disk(tmp_path: Path):
    from concurrent.futures import ThreadPoolExecutor

    boot = tmp_path / "boot"
    boot.write_text("b1")
    ckpt = Checkpoint(tmp_path / "cp.json", boot)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: ckpt.put(record(f"u{i}")), range(64)))
    ckpt.remove("u3")
    again = Checkpoint(tmp_path / "cp.json", boot)
    again.load()
    assert sorted(r.uid for r in again.records()) == sorted(f"u{i}" for i in range(64) if i != 3)
