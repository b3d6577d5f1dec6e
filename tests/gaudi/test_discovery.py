from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from dra_driver.common.errors import BackendUnavailable, ProfileError
from dra_driver.backend.interface import BackendSettings
from dra_driver_gaudi.backend import GaudiBackend
from dra_driver_gaudi.discovery import discover_devices

from .conftest import NODE, one_device, profile_section


def by_bdf(sysfs_root: Path) -> dict[str, tuple[str, int, int, str | None, int | None]]:
    return {d.bdf: (d.device_id, d.accel_index, d.module_id, d.pcie_root, d.uverbs_index) for d in discover_devices(sysfs_root)}


@pytest.mark.parametrize("name", ["gaudi2-hls", "gaudi3-hls", "gaudi2-legacy-kernel", "gaudi2-intel-faker"])
def test_every_profile_device_is_read_back_from_its_tree(open_profile, name):
    section = profile_section(name)
    backend = open_profile(section)
    expected = {
        d["bdf"]: (d["device_id"], d["accel_index"], d["module_id"], d["pci_root"], d.get("uverbs"))
        for d in section["devices"]
    }
    assert by_bdf(backend.settings.sysfs_root) == expected


def test_hls_profiles_have_eight_devices_with_non_identity_modules():
    for name in ("gaudi2-hls", "gaudi3-hls"):
        devices = profile_section(name)["devices"]
        assert len(devices) == 8
        assert sorted(d["module_id"] for d in devices) == list(range(8))
        assert any(d["module_id"] != d["accel_index"] for d in devices)


def test_legacy_layout_has_no_accel_dir_and_still_resolves(open_profile):
    backend = open_profile("gaudi2-legacy-kernel")
    root = backend.settings.sysfs_root
    function = root / "bus/pci/drivers/habanalabs/0000:9a:00.0"
    assert not (function / "accel").exists() and not (function / "module_id").exists()
    assert (root / "devices/virtual/accel/accel2/device/pci_addr").is_file()
    device = next(d for d in discover_devices(root) if d.bdf == "0000:9a:00.0")
    assert (device.accel_index, device.module_id) == (2, 0)


def test_trailing_newline_and_none_read_the_same(tmp_path):
    results = []
    for newline in (True, False):
        root = tmp_path / str(newline)
        from dra_driver_gaudi.simulated.fake_sysfs import build_fake_sysfs

        build_fake_sysfs({"trailing_newline": newline, "devices": [one_device()]}, root)
        raw = (root / "bus/pci/drivers/habanalabs/0000:19:00.0/module_id").read_text()
        assert raw.endswith("\n") == newline
        results.append(by_bdf(root))
    assert results[0] == results[1] == {"0000:19:00.0": ("0x1020", 2, 6, "pci0000:15", 4)}


def test_missing_nic_gives_no_uverbs(host_tree):
    tree = host_tree({"devices": [one_device(uverbs=None)]})
    [device] = discover_devices(tree.root)
    assert device.uverbs_index is None


def test_upper_case_device_id_is_normalised(host_tree):
    tree = host_tree({"devices": [one_device(device_id="0x10A0")]})
    [device] = discover_devices(tree.root)
    assert device.device_id == "0x10a0"
    assert device.name == "0000-19-00-0-0x10a0"


def test_unreadable_device_is_skipped_others_kept(host_tree, caplog):
    tree = host_tree({"devices": [one_device(), one_device(bdf="0000:1a:00.0", accel_index=3, module_id=7)]})
    (tree.root / "devices/pci0000:15/0000:1a:00.0/device").write_text("not-hex\n")
    with caplog.at_level(logging.WARNING):
        devices = discover_devices(tree.root)
    assert [d.bdf for d in devices] == ["0000:19:00.0"]
    assert any(getattr(r, "fields", {}).get("device") == "0000:1a:00.0" for r in caplog.records)


def test_two_accel_entries_are_refused(host_tree):
    tree = host_tree({"devices": [one_device()]})
    (tree.root / "devices/pci0000:15/0000:19:00.0/accel/accel9").mkdir()
    assert discover_devices(tree.root) == []


def test_missing_module_id_skips_the_device(host_tree):
    tree = host_tree({"devices": [one_device()]})
    os.remove(tree.root / "devices/pci0000:15/0000:19:00.0/module_id")
    assert discover_devices(tree.root) == []


def test_non_bdf_entries_of_the_driver_dir_are_ignored(host_tree):
    tree = host_tree({"devices": [one_device()]})
    driver = tree.root / "bus/pci/drivers/habanalabs"
    (driver / "module").mkdir()
    (driver / "new_id").write_text("")
    assert [d.bdf for d in discover_devices(tree.root)] == ["0000:19:00.0"]


def test_from_host_reads_a_real_layout_tree(host_tree):
    tree = host_tree(profile_section("gaudi2-hls"))
    backend = GaudiBackend.from_host(BackendSettings(node_name=NODE, sysfs_root=tree.root))
    try:
        assert len(backend.discover().devices) == 8
        assert backend.fake is None
    finally:
        backend.close()


def test_from_host_without_devices_is_unavailable(tmp_path):
    (tmp_path / "bus/pci/drivers/habanalabs").mkdir(parents=True)
    for root in (tmp_path, tmp_path / "does-not-exist"):
        with pytest.raises(BackendUnavailable) as raised:
            GaudiBackend.from_host(BackendSettings(sysfs_root=root))
        assert raised.value.vendor == "gaudi"
        assert f"no Gaudi devices bound to the habanalabs driver under {root}" in str(raised.value)


def test_profile_dir_ships_the_named_profiles():
    names = {path.stem for path in GaudiBackend.profile_dir().glob("*.yaml")}
    assert {"gaudi2-hls", "gaudi3-hls", "gaudi2-legacy-kernel"} <= names


@pytest.mark.parametrize(
    ("section", "needle"),
    [
        ({"devices": [one_device(bdf="0000:19:00")]}, "gaudi.devices.0.bdf"),
        ({"devices": [one_device(pci_root="0000:15")]}, "gaudi.devices.0.pci_root"),
        ({"devices": [one_device(), one_device(bdf="0000:1a:00.0")]}, "repeat accel_index"),
        ({"devices": [one_device(colour="red")]}, "gaudi.devices.0.colour"),
        ({"devices": []}, "gaudi.devices"),
        ({"layout": "ancient", "devices": [one_device()]}, "gaudi.layout"),
    ],
)
def test_bad_profile_sections_name_the_field(section, needle):
    with pytest.raises(ProfileError, match=needle.replace(".", r"\.")):
        GaudiBackend.from_profile(section, BackendSettings())


def test_section_wide_profile_errors_say_so():
    # A model-level check has no field location; the message must still say where to look.
    with pytest.raises(ProfileError, match=r"gaudi\.\(section\): .*repeat accel_index"):
        GaudiBackend.from_profile({"devices": [one_device(), one_device(bdf="0000:1a:00.0")]}, BackendSettings())


def test_close_removes_the_simulated_tree(open_profile):
    backend = open_profile("gaudi2-intel-faker")
    root = backend.settings.sysfs_root
    assert root.is_dir()
    backend.close()
    backend.close()  # idempotent
    assert not root.exists()


def test_registry_finds_the_backend_and_its_profiles():
    from dra_driver.backend.hardware_profiles import load_profile
    from dra_driver.backend.registry import backend_classes, open_backends

    assert backend_classes()["gaudi"] is GaudiBackend
    opened = open_backends(BackendSettings(node_name=NODE), load_profile("gaudi3-hls"), ["gaudi"])
    try:
        [backend] = opened.backends
        assert isinstance(backend, GaudiBackend) and len(backend.discover().devices) == 8
    finally:
        opened.close()
