from __future__ import annotations

import pytest

from dra_driver.model.device import Version
from dra_driver.model.quantity import parse
from dra_driver.model.render import render_pool
from dra_driver.model.validation import is_dns_label, validate_slices
from dra_driver.backend.vocabulary import (
    FAMILY,
    INTERCONNECT,
    INTERCONNECT_DOMAIN,
    INTERCONNECT_LINKS,
    NUMA_NODE,
    PARTITION,
    PCI_BUS_ID,
    PCIE_ROOT,
    VENDOR,
    interconnect_domain,
)
from dra_driver_gaudi.models import model_for, normalize_device_id

from .conftest import NODE, one_device, profile_section

GIB = 1 << 30


def test_gaudi2_hls_device_attributes(open_profile):
    backend = open_profile("gaudi2-hls")
    device = backend.discover().device("0000-4d-00-0-0x1020")
    assert device.attributes == {
        "model": "Gaudi2",
        "serial": "",
        "healthy": True,
        "pciDeviceId": "0x1020",
        "accelIndex": 2,
        "moduleId": 7,
        "nic": True,
        "uverbsIndex": 2,
        "pciRoot": "4a",
        "driverVersion": Version("1.21.0"),
        "scaleOutPorts": 3,
        PCI_BUS_ID: "0000:4d:00.0",
        PCIE_ROOT: "pci0000:4a",
        VENDOR: "intel",
        FAMILY: "gaudi2",
        PARTITION: False,
        INTERCONNECT: "roce",
        INTERCONNECT_DOMAIN: interconnect_domain("roce", NODE),
        INTERCONNECT_LINKS: 21,
    }
    assert parse(device.capacity["memory"]) == 96 * GIB


def test_gaudi3_serials_come_from_the_simulated_hlml(open_profile):
    section = profile_section("gaudi3-hls")
    backend = open_profile(section)
    inventory = backend.discover()
    expected = {f"{d['bdf'].replace(':', '-').replace('.', '-')}-0x1060": d["serial"] for d in section["devices"]}
    assert {d.name: d.attributes["serial"] for d in inventory.devices} == expected
    assert {d.attributes["model"] for d in inventory.devices} == {"Gaudi3"}
    assert {d.attributes[FAMILY] for d in inventory.devices} == {"gaudi3"}
    assert {parse(d.capacity["memory"]) for d in inventory.devices} == {128 * GIB}


def test_all_devices_share_the_in_box_domain(open_profile):
    inventory = open_profile("gaudi3-hls").discover()
    assert {d.attributes[INTERCONNECT_DOMAIN] for d in inventory.devices} == {f"roce.{NODE}"}


def test_intel_faker_tree_gives_intels_device_names(open_profile):
    inventory = open_profile("gaudi2-intel-faker").discover()
    assert [d.name for d in inventory.devices] == ["0000-a0-00-0-0x1020", "0000-b0-00-0-0x1020"]
    assert [d.attributes[PCIE_ROOT] for d in inventory.devices] == ["pci0000:01", "pci0000:02"]
    assert [d.attributes["pciRoot"] for d in inventory.devices] == ["01", "02"]


def test_missing_nic_publishes_nic_false_and_no_uverbs_index(open_profile):
    [device] = open_profile({"devices": [one_device(uverbs=None)]}).discover().devices
    assert device.attributes["nic"] is False
    assert "uverbsIndex" not in device.attributes


def test_unknown_device_id_is_published_as_unknown_without_memory(open_profile):
    [device] = open_profile({"devices": [one_device(device_id="0x10ff")]}).discover().devices
    assert device.name == "0000-19-00-0-0x10ff"
    assert device.attributes["model"] == "Unknown"
    assert device.attributes[FAMILY] == "unknown"
    assert device.attributes[INTERCONNECT] == "none"
    assert INTERCONNECT_DOMAIN not in device.attributes
    assert "memory" not in device.capacity


def test_driver_version_without_semver_head_is_omitted(open_profile):
    [device] = open_profile({"driver_version": "unknown", "devices": [one_device()]}).discover().devices
    assert "driverVersion" not in device.attributes


@pytest.mark.parametrize(("written", "published"), [(1, 1), (-1, None), (None, None)])
def test_numa_node_from_sysfs_under_the_standard_name(host_tree, written, published):
    """resource.kubernetes.io/numaNode (KEP-6072) from <function>/numa_node; -1 (no affinity) or no file: not published."""
    tree = host_tree({"devices": [one_device(**({"numa_node": written} if written is not None and written >= 0 else {}))]})
    if written == -1:
        (tree.root / "bus/pci/devices/0000:19:00.0/numa_node").write_text("-1\n")
    from dra_driver.backend.interface import BackendSettings
    from dra_driver_gaudi.backend import GaudiBackend

    backend = GaudiBackend.from_host(BackendSettings(sysfs_root=tree.root))
    try:
        [device] = backend.discover().devices
    finally:
        backend.close()
    assert device.attributes.get(NUMA_NODE) == published


def test_no_pcie_root_when_the_path_has_none(host_tree):
    # A BDF entry that is a plain directory (no symlink into devices/pciXXXX:YY).
    tree = host_tree({"devices": [one_device()]})
    link = tree.root / "bus/pci/drivers/habanalabs/0000:19:00.0"
    target = link.resolve()
    link.unlink()
    target.rename(link)
    from dra_driver.backend.interface import BackendSettings
    from dra_driver_gaudi.backend import GaudiBackend

    backend = GaudiBackend.from_host(BackendSettings(sysfs_root=tree.root))
    try:
        [device] = backend.discover().devices
    finally:
        backend.close()
    assert PCIE_ROOT not in device.attributes and "pciRoot" not in device.attributes
    assert device.attributes[PCI_BUS_ID] == "0000:19:00.0"


@pytest.mark.parametrize(
    ("device_id", "model", "family"),
    [
        ("0x1000", "Gaudi", "gaudi"),
        ("0x1020", "Gaudi2", "gaudi2"),
        ("0x1030", "Gaudi2", "gaudi2"),
        ("0x1060", "Gaudi3", "gaudi3"),
        ("0x1063", "Gaudi3", "gaudi3"),
        ("0x0001", "Unknown", "unknown"),
    ],
)
def test_pci_id_map(device_id, model, family):
    assert (model_for(device_id).name, model_for(device_id).family) == (model, family)


def test_device_id_normalisation():
    assert normalize_device_id("0X1060\n") == "0x1060"
    assert normalize_device_id("1020") == "0x1020"
    with pytest.raises(ValueError):
        normalize_device_id("0x12345")


@pytest.mark.parametrize("name", ["gaudi2-hls", "gaudi3-hls", "gaudi2-legacy-kernel", "gaudi2-intel-faker"])
def test_profiles_render_to_valid_slices(open_profile, name):
    inventory = open_profile(name).discover()
    assert inventory.driver == "gaudi.intel.com"
    assert all(is_dns_label(d.name) for d in inventory.devices)
    slices = render_pool(inventory, NODE)
    validate_slices(slices)
    published = [d["name"] for s in slices for d in s["spec"]["devices"]]
    assert sorted(published) == sorted(d.name for d in inventory.devices)


def _common_vocabulary_selectors() -> list[str]:
    """Every CEL expression of the docs' Common vocabulary section."""
    import re
    from pathlib import Path

    import yaml

    text = (Path(__file__).parents[2] / "docs" / "attributes.md").read_text()
    section = text.split("## Common vocabulary", 1)[1].split("\n## ", 1)[0]
    expressions: list[str] = []
    for block in re.findall(r"```yaml\n(.*?)```", section, re.S):
        for item in yaml.safe_load(block) or []:
            if isinstance(item, dict) and "cel" in item:
                expressions.append(item["cel"]["expression"])
    return expressions


def test_documented_cross_vendor_selectors_skip_a_device_without_memory(open_profile):
    from dra_driver.cel.device import cel_device
    from dra_driver.cel.selector import compile_selector

    expressions = _common_vocabulary_selectors()
    assert any("memory" in e for e in expressions)
    inventory = open_profile(
        {"devices": [one_device(device_id="0x10ff"), one_device(bdf="0000:1a:00.0", device_id="0x1060", accel_index=3, module_id=7, uverbs=5)]}
    ).discover()
    [slice_] = render_pool(inventory, NODE)
    for device in slice_["spec"]["devices"]:
        for expression in expressions:
            # A runtime error here would fail the claim instead of skipping the device.
            compile_selector(expression).evaluate(cel_device("gaudi.intel.com", device))


def test_unknown_device_id_publishes_memory_when_hlml_reports_it(open_profile):
    backend = open_profile({"devices": [one_device(device_id="0x10ff", serial="S1")]})  # a serial turns on the simulated HLML
    backend.fake_hlml.set_memory_total("0000:19:00.0", 64 << 30)
    [device] = backend.discover().devices
    assert device.capacity["memory"] == "64Gi"


def test_over_long_hlml_serial_is_dropped_for_that_device_only(open_profile, caplog):
    devices = [one_device(serial="S" * 70), one_device(bdf="0000:1a:00.0", accel_index=3, module_id=7, uverbs=5, serial="S2")]
    inventory = open_profile({"devices": devices}).discover()
    assert inventory.device("0000-19-00-0-0x1020").attributes["serial"] == ""
    assert inventory.device("0000-1a-00-0-0x1020").attributes["serial"] == "S2"
    validate_slices(render_pool(inventory, NODE))  # the pool still publishes
    assert "HLML serial longer" in caplog.text
