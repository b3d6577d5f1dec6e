"""Whole-GPU devices: names, every attribute, capacities, XGMI hive, slice validity."""

from __future__ import annotations

import yaml

from dra_driver.backend import vocabulary
from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.model import render_pool, validate_slices
from dra_driver.model.device import Version
from dra_driver.model.validation import is_dns_label
from dra_driver.backend.sysfs import pci_device_dir

from dra_driver_amd.attributes import driver_version, family, product_name


def _profile_gpus(name: str) -> list[dict]:
    return list(load_profile(name).sections["amd"]["gpus"])


def test_mi300x_whole_gpu_attributes(open_backend):
    inventory = open_backend("mi300x").discover()
    gpus = _profile_gpus("mi300x")
    assert len(inventory.devices) == len(gpus) == 8
    for device, gpu in zip(inventory.devices, gpus):
        assert device.name == f"gpu-{gpu['card']}-{gpu['render']}"
        a = device.attributes
        assert a["type"] == "amdgpu"
        assert a["productName"] == "AMD_Instinct_MI300X_OAM"  # sysfs product_name, as the ROCm DRA driver reports it
        assert a["deviceID"] == "0x74a1"
        assert a["gfxTarget"] == "gfx942"
        assert a["driverVersion"] == Version("6.12.12")
        assert a["driverVersionFull"] == "6.12.12"
        assert a["partitionProfile"] == "spx_nps1"
        assert (a["computePartition"], a["memoryPartition"]) == ("spx", "nps1")
        assert a["numaNode"] == a[vocabulary.NUMA_NODE] == gpu["numa_node"]  # vendor name kept beside the standard one
        assert a[vocabulary.PCI_BUS_ID] == gpu["bdf"]
        assert a[vocabulary.PCIE_ROOT] == gpu["pcie_root"]
        assert (a["cardIndex"], a["renderIndex"]) == (gpu["card"], gpu["render"])
        assert a["uuid"].split("-")[0].endswith("74a1")
        assert device.capacity == {"memory": "196592Mi", "computeUnits": "304", "simdUnits": "1216"}
        assert a[vocabulary.VENDOR] == "amd"
        assert a[vocabulary.FAMILY] == "cdna3"
        assert a[vocabulary.PARTITION] is False
        assert "partitionIndex" not in a and "parentDevice" not in a


def test_uuids_and_names_are_unique(open_backend):
    devices = open_backend("mi300x").discover().devices
    assert len({d.attributes["uuid"] for d in devices}) == len(devices)
    assert all(is_dns_label(d.name) for d in devices)


def test_xgmi_hive_attributes_allow_match_attribute(open_backend):
    devices = open_backend("mi300x").discover().devices
    hive = f"0x{15188982192727901047:016x}"
    for device in devices:
        a = device.attributes
        assert a["xgmiHiveID"] == hive == a[vocabulary.INTERCONNECT_DOMAIN]
        assert a[vocabulary.INTERCONNECT] == "xgmi"
        assert a[vocabulary.INTERCONNECT_LINKS] == 7  # all-to-all among 8 GPUs


def test_gpus_outside_a_hive_have_no_domain(open_backend):
    section = dict(load_profile("mi210").sections["amd"])
    gpus = [dict(g) for g in section["gpus"]]
    gpus[0]["hive_id"] = 0  # a card without a bridge
    section["gpus"] = gpus
    by_bdf = {d.attributes[vocabulary.PCI_BUS_ID]: d for d in open_backend(section=section).discover().devices}
    alone, bridged = by_bdf[gpus[0]["bdf"]], by_bdf[gpus[1]["bdf"]]
    assert alone.attributes[vocabulary.INTERCONNECT] == "none"
    assert alone.attributes[vocabulary.INTERCONNECT_LINKS] == 0
    assert vocabulary.INTERCONNECT_DOMAIN not in alone.attributes and "xgmiHiveID" not in alone.attributes
    assert bridged.attributes[vocabulary.INTERCONNECT_LINKS] == 2  # the remaining three share the bridge


def test_cdna2_boards_have_no_partition_modes(open_backend):
    for profile, device_id, cus, links in (("mi250x", "0x740c", "110", 7), ("mi210", "0x740f", "104", 3)):
        devices = open_backend(profile).discover().devices
        for device in devices:
            a = device.attributes
            assert a["type"] == "amdgpu"
            assert a["gfxTarget"] == "gfx90a" and a[vocabulary.FAMILY] == "cdna2"
            assert a["deviceID"] == device_id
            assert "partitionProfile" not in a and "computePartition" not in a
            assert a[vocabulary.INTERCONNECT_LINKS] == links
            assert device.capacity["memory"] == "65520Mi" and device.capacity["computeUnits"] == cus


def test_every_profile_renders_valid_slices(open_backend):
    for profile in ("mi300x", "mi300x-cpx", "mi250x", "mi210"):
        for partitioning in ("static", "dynamic"):
            inventory = open_backend(profile, partitioning).discover()
            slices = render_pool(inventory, "node-a")
            validate_slices(slices)
            assert all(len(d.attributes) + len(d.capacity) <= 32 for d in inventory.devices)


def test_shipped_profiles_have_name_and_description():
    for name in ("mi300x", "mi300x-cpx", "mi250x", "mi210"):
        profile = load_profile(name)
        raw = yaml.safe_load(profile.source.read_text())
        assert raw["name"] == name and raw["description"]
        assert set(raw) == {"name", "description", "amd"}


def test_helpers():
    assert family("gfx942") == "cdna3" and family("gfx90a") == "cdna2" and family("gfx1100") == "unknown"
    assert product_name("AMD Instinct MI250X / MI250") == "AMD_Instinct_MI250X_/_MI250"
    assert product_name("AMD Instinct MI300X (OAM)") == "AMD_Instinct_MI300X_OAM"
    assert driver_version("6.8.0-45-generic") == Version("6.8.0")
    assert driver_version("6.7") == Version("6.7.0")
    assert driver_version("N/A") is None


def test_non_semver_driver_keeps_full_string_only(open_backend):
    section = dict(load_profile("mi210").sections["amd"])
    section["driver"] = {"version": "N/A"}
    device = open_backend(section=section).discover().devices[0]
    assert "driverVersion" not in device.attributes
    assert device.attributes["driverVersionFull"] == "N/A"


def test_product_name_falls_back_to_the_market_name_without_sysfs_product_name(open_backend):
    """mi210's profile has no sysfs product_name (the file is absent on such boards)."""
    for device in open_backend("mi210").discover().devices:
        assert device.attributes["productName"] == "AMD_Instinct_MI210"


def test_product_name_is_read_from_sysfs_each_discovery(open_backend):
    backend = open_backend("mi300x")
    device = backend.discover().devices[0]
    bdf = device.attributes["resource.kubernetes.io/pciBusID"]
    (pci_device_dir(backend.settings.sysfs_root, str(bdf)) / "product_name").write_text("AMD Instinct MI300X (OAM) rev B\n")
    renamed = backend.discover().devices[0]
    assert renamed.attributes["productName"] == "AMD_Instinct_MI300X_OAM_rev_B"
