from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.common.errors import DeviceError
from dra_driver.backend.interface import AllocatedDevice, ClaimRef, DeviceNode, Hook, Mount

CLAIM = ClaimRef(namespace="default", name="train", uid="4d1c6e0a-7a0e-4a43-9b0e-3b8c5a1f0c11")


def allocate(*names: str, request: str = "gaudi") -> list[AllocatedDevice]:
    return [AllocatedDevice(request=request, pool="node", device=name) for name in names]


def env_map(env: list[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in env)


def test_device_nodes_per_device(open_profile):
    backend = open_profile("gaudi2-hls")
    prepared = backend.prepare(CLAIM, allocate("0000-9b-00-0-0x1020"))
    [device] = prepared.devices
    assert device.device == "0000-9b-00-0-0x1020"
    assert device.edits.device_nodes == [
        DeviceNode(path="/dev/accel/accel5", type="c"),
        DeviceNode(path="/dev/accel/accel_controlD5", type="c"),
        DeviceNode(path="/dev/infiniband/uverbs5", type="c"),
    ]
    assert device.edits.env == [] and device.edits.hooks == []


def test_request_env_lists_indices_modules_and_paths_sorted(open_profile):
    backend = open_profile("gaudi2-hls")
    # accel 6 (module 0), accel 1 (module 4), accel 3 (module 6), given out of order.
    prepared = backend.prepare(CLAIM, allocate("0000-b3-00-0-0x1020", "0000-1a-00-0-0x1020", "0000-4e-00-0-0x1020"))
    assert prepared.claim_edits.env == []  # a claim-wide list would span requests
    assert env_map(prepared.request_edits["gaudi"].env) == {
        "HABANA_VISIBLE_DEVICES": "1,3,6",
        "HABANA_VISIBLE_MODULES": "0,4,6",
        "HL_VISIBLE_DEVICES": "/dev/accel/accel1,/dev/accel/accel3,/dev/accel/accel6",
    }
    assert [d.device for d in prepared.devices] == ["0000-b3-00-0-0x1020", "0000-1a-00-0-0x1020", "0000-4e-00-0-0x1020"]


def test_no_nic_node_without_verbs_device(open_profile):
    backend = open_profile("gaudi2-legacy-kernel")
    [device] = backend.prepare(CLAIM, allocate("0000-9a-00-0-0x1020")).devices
    assert [n.path for n in device.edits.device_nodes] == ["/dev/accel/accel2", "/dev/accel/accel_controlD2"]


def test_host_paths_follow_dev_root(open_profile, tmp_path):
    backend = open_profile("gaudi2-hls", dev_root=tmp_path / "hostdev")
    [device] = backend.prepare(CLAIM, allocate("0000-19-00-0-0x1020")).devices
    assert [(n.path, n.host_path) for n in device.edits.device_nodes] == [
        ("/dev/accel/accel0", str(tmp_path / "hostdev/accel/accel0")),
        ("/dev/accel/accel_controlD0", str(tmp_path / "hostdev/accel/accel_controlD0")),
        ("/dev/infiniband/uverbs0", str(tmp_path / "hostdev/infiniband/uverbs0")),
    ]


def test_no_hook_or_mount_when_host_lacks_them(open_profile, tmp_path):
    backend = open_profile("gaudi2-hls", driver_root=tmp_path)
    edits = backend.prepare(CLAIM, allocate("0000-19-00-0-0x1020")).claim_edits
    assert edits.hooks == [] and edits.mounts == []


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")


@pytest.mark.parametrize("hook", ["usr/bin/habana-container-hook", "usr/local/habana/bin/habana-container-hook"])
def test_hook_and_gaudinet_when_present_on_host(open_profile, tmp_path, hook):
    _touch(tmp_path / hook)
    _touch(tmp_path / "etc/habanalabs/gaudinet.json")
    backend = open_profile("gaudi3-hls", driver_root=tmp_path)
    edits = backend.prepare(CLAIM, allocate("0000-1b-00-0-0x1060")).claim_edits
    [created] = edits.hooks
    assert isinstance(created, Hook)
    assert (created.hook_name, created.path, created.args) == ("createRuntime", f"/{hook}", ("habana-container-hook", "createRuntime"))
    assert any(item.startswith("PATH=") for item in created.env)
    assert edits.mounts == [
        Mount(host_path="/etc/habanalabs/gaudinet.json", container_path="/etc/habanalabs/gaudinet.json", options=("ro", "nosuid", "nodev", "bind"))
    ]


def test_unknown_device_fails_with_device_error(open_profile):
    backend = open_profile("gaudi2-hls")
    with pytest.raises(DeviceError) as raised:
        backend.prepare(CLAIM, allocate("0000-19-00-0-0x1020", "0000-ff-00-0-0x1020"))
    assert raised.value.device == "0000-ff-00-0-0x1020"


def test_prepare_is_idempotent_and_unprepare_is_a_no_op(open_profile):
    backend = open_profile("gaudi2-hls")
    names = ("0000-19-00-0-0x1020", "0000-1a-00-0-0x1020")
    first = backend.prepare(CLAIM, allocate(*names))
    second = backend.prepare(CLAIM, allocate(*names))
    assert first == second
    backend.unprepare(CLAIM, first.state)
    backend.unprepare(CLAIM, first.state)
    assert backend.prepare(CLAIM, allocate(*names)) == first


def test_same_device_twice_in_a_claim_is_prepared_once(open_profile):
    backend = open_profile("gaudi2-hls")
    prepared = backend.prepare(CLAIM, allocate("0000-19-00-0-0x1020", "0000-19-00-0-0x1020"))
    assert len(prepared.devices) == 1
    assert env_map(prepared.request_edits["gaudi"].env)["HABANA_VISIBLE_DEVICES"] == "0"


def test_visibility_env_is_per_request(open_profile):
    backend = open_profile("gaudi2-hls")
    # accel 6 and 1 for request "train", accel 3 for request "infer".
    allocated = allocate("0000-b3-00-0-0x1020", "0000-1a-00-0-0x1020", request="train") + allocate("0000-4e-00-0-0x1020", request="infer")
    prepared = backend.prepare(CLAIM, allocated)
    assert set(prepared.request_edits) == {"train", "infer"}
    train, infer = (env_map(prepared.request_edits[r].env) for r in ("train", "infer"))
    assert (train["HABANA_VISIBLE_DEVICES"], train["HABANA_VISIBLE_MODULES"]) == ("1,6", "0,4")
    assert (infer["HABANA_VISIBLE_DEVICES"], infer["HL_VISIBLE_DEVICES"]) == ("3", "/dev/accel/accel3")
    assert not any(e.startswith(("HABANA_", "HL_")) for e in prepared.claim_edits.env)
