"""CDI specs (dra_driver/node/cdi.py): rendering, minimum versions, names, atomic files and which files are ours."""

from __future__ import annotations

import json
from pathlib import Path

from dra_driver.node import cdi
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
