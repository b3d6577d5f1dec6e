"""Full-GPU discovery through the real pynvml code on the simulated library."""

from __future__ import annotations

import copy

import pytest

from dra_driver.common.errors import BackendUnavailable, ProfileError
from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.model import Version, render_pool, validate_slices
from dra_driver.backend.registry import open_backends
from dra_driver.backend.interface import BackendSettings
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
)
from dra_driver_nvidia.simulated import fake_nvml
from dra_driver_nvidia.attributes import semver
from dra_driver_nvidia.backend import NvidiaBackend

from .conftest import OpenBackend, profile_section


def test_dgx_h100_publishes_eight_gpus_with_upstream_attributes(open_backend: OpenBackend) -> None:
    section = profile_section("dgx-h100")
    inventory = open_backend(section).discover()
    assert [d.name for d in inventory.devices] == [f"gpu-{i}" for i in range(8)]
    for position, device in enumerate(inventory.devices):
        spec = section["gpus"][position]
        attrs = device.attributes
        assert attrs["type"] == "gpu"
        assert attrs["uuid"] == spec["uuid"]
        assert attrs["productName"] == "NVIDIA H100 80GB HBM3"
        assert attrs["brand"] == "Nvidia"
        assert attrs["architecture"] == "Hopper"
        assert attrs["cudaComputeCapability"] == Version("9.0.0")
        assert attrs["driverVersion"] == Version("580.159.4")
        assert attrs["cudaDriverVersion"] == Version("13.0.0")
        assert attrs["index"] == position
        assert attrs["minor"] == spec["minor"]
        assert attrs[PCI_BUS_ID] == spec["pciBusId"].removeprefix("0000").lower()
        assert attrs[PCIE_ROOT] == spec["pcieRoot"]
        assert attrs["nvlinkLinks"] == 18
        assert attrs["nvlinkVersion"] == Version("4.0.0")
        assert device.capacity["memory"] == "81559Mi"
        assert device.capacity["multiprocessors"] == "132"
        # Engine counts of the full GPU come from its full-size MIG profile (7g.80gb).
        assert (device.capacity["copyEngines"], device.capacity["decoders"], device.capacity["jpegEngines"], device.capacity["ofaEngines"]) == (
            "8",
            "7",
            "7",
            "1",
        )


def test_common_vocabulary_for_nvlink_gpus(open_backend: OpenBackend) -> None:
    device = open_backend("dgx-h100", node_name="worker-7").discover().devices[0]
    attrs = device.attributes
    assert (attrs[VENDOR], attrs[FAMILY], attrs[PARTITION]) == ("nvidia", "hopper", False)
    assert (attrs[INTERCONNECT], attrs[INTERCONNECT_LINKS]) == ("nvlink", 18)
    assert attrs[INTERCONNECT_DOMAIN] == "nvlink.worker-7"


@pytest.mark.parametrize(
    ("profile", "product", "family", "cc", "memory", "sms", "driver"),
    [
        # No MIG data on L4/T4, and nvmlDeviceGetAttributes fails on full GPUs: no SM count.
        ("l4", "NVIDIA L4", "ada-lovelace", "8.9.0", "23034Mi", None, "570.133.20"),
        ("t4", "Tesla T4", "turing", "7.5.0", "15Gi", None, "525.89.2"),
        ("h200", "NVIDIA H200", "hopper", "9.0.0", "143771Mi", "132", "580.159.4"),
        ("h200-nvl", "NVIDIA H200 NVL", "hopper", "9.0.0", "143771Mi", "132", "570.195.3"),
        # B200/GB200 are simulated without MIG (their full -lgip table is not public): no SM count either.
        ("b200", "NVIDIA B200", "blackwell", "10.0.0", "183359Mi", None, "570.172.8"),
        ("gb200", "NVIDIA GB200", "blackwell", "10.0.0", "189471Mi", None, "580.126.9"),
    ],
)
def test_other_profiles(
    open_backend: OpenBackend, profile: str, product: str, family: str, cc: str, memory: str, sms: str | None, driver: str
) -> None:
    device = open_backend(profile).discover().devices[0]
    assert device.attributes["productName"] == product
    assert device.attributes[FAMILY] == family
    assert device.attributes["cudaComputeCapability"] == Version(cc)
    assert device.attributes["driverVersion"] == Version(driver)
    assert device.capacity["memory"] == memory
    assert device.capacity.get("multiprocessors") == sms


def test_gpu_without_nvlink_or_mig(open_backend: OpenBackend) -> None:
    device = open_backend("l4").discover().devices[0]
    assert device.attributes[INTERCONNECT] == "none"
    assert device.attributes[INTERCONNECT_LINKS] == 0
    assert INTERCONNECT_DOMAIN not in device.attributes
    assert "nvlinkLinks" not in device.attributes and "nvlinkVersion" not in device.attributes
    # No MIG data: the SM and engine counts of the whole GPU are unknown, so not published.
    assert set(device.capacity) == {"memory"}


def test_names_use_the_minor_number_not_the_index(open_backend: OpenBackend) -> None:
    section = profile_section("dgx-h100")
    section["gpus"][0]["minor"], section["gpus"][1]["minor"] = 1, 0
    devices = open_backend(section).discover().devices
    assert [(d.name, d.attributes["index"]) for d in devices[:2]] == [("gpu-1", 0), ("gpu-0", 1)]


def test_fabric_clique_becomes_the_interconnect_domain(open_backend: OpenBackend) -> None:
    section = profile_section("dgx-h100")
    for gpu in section["gpus"]:
        gpu["fabric"] = {"clusterUuid": "5f0e3a2b-9c1d-4e7f-8a6b-0c2d4e6f8a10", "cliqueId": 32766}
    section["gpus"][7]["fabric"]["state"] = 2  # still in progress: no clique yet
    devices = open_backend(section).discover().devices
    clique = "5f0e3a2b-9c1d-4e7f-8a6b-0c2d4e6f8a10.32766"
    assert devices[0].attributes["nvlinkClique"] == clique
    assert devices[0].attributes["nvlinkClusterUUID"] == "5f0e3a2b-9c1d-4e7f-8a6b-0c2d4e6f8a10"
    assert devices[0].attributes["nvlinkCliqueID"] == 32766
    assert devices[0].attributes[INTERCONNECT_DOMAIN] == clique
    assert not {"nvlinkClique", "nvlinkClusterUUID", "nvlinkCliqueID"} & set(devices[7].attributes)
    assert devices[7].attributes[INTERCONNECT_DOMAIN] == "nvlink.node-a"


def test_blackwell_boards_publish_nvlink_5_and_the_tray_clique(open_backend: OpenBackend) -> None:
    """NVML_NVLINK_VERSION_5_0 (7) reads as NVLink 5.0; a GB200 tray's four GPUs share one clique."""
    b200 = open_backend("b200").discover().devices
    assert {(d.attributes["nvlinkVersion"], d.attributes["nvlinkLinks"], d.attributes["architecture"]) for d in b200} == {
        (Version("5.0.0"), 18, "Blackwell")
    }
    gb200 = open_backend("gb200").discover().devices
    assert len(gb200) == 4 and len({d.attributes[INTERCONNECT_DOMAIN] for d in gb200}) == 1
    assert all("nvlinkClique" in d.attributes and d.attributes["nvlinkVersion"] == Version("5.0.0") for d in gb200)


def test_semver_normalisation() -> None:
    assert semver("580.159.04") == Version("580.159.4")
    assert semver("9.0") == Version("9.0.0")
    assert semver("13") == Version("13.0.0")


def test_rendered_pool_is_valid(open_backend: OpenBackend) -> None:
    inventory = open_backend("dgx-h100").discover()
    slices = render_pool(inventory, node_name="node-a")
    validate_slices(slices)
    assert slices[0]["spec"]["driver"] == "gpu.nvidia.com"


def test_registry_opens_profile_like_discover_does() -> None:
    """The path `dra-driver discover --profile dgx-h100` takes: 8 GPUs, 81559Mi each."""
    opened = open_backends(BackendSettings(node_name="n1"), profile=load_profile("dgx-h100"), vendors=["nvidia"])
    try:
        assert not opened.unavailable
        devices = opened.backends[0].discover().devices
    finally:
        opened.close()
    assert len(devices) == 8
    assert {d.capacity["memory"] for d in devices} == {"81559Mi"}


# ---- failures ----------------------------------------------------------------


def test_lost_gpu_is_skipped_and_others_published(open_backend: OpenBackend, caplog: pytest.LogCaptureFixture) -> None:
    section = profile_section("dgx-h100")
    section["gpus"][3]["failures"] = {"nvmlDeviceGetName": "GPU_IS_LOST"}
    devices = open_backend(section).discover().devices
    assert [d.name for d in devices] == [f"gpu-{i}" for i in range(8) if i != 3]
    assert any("nvmlDeviceGetName" in str(getattr(r, "fields", "")) for r in caplog.records)


def test_unsupported_optional_calls_do_not_drop_the_gpu(open_backend: OpenBackend) -> None:
    section = profile_section("dgx-h100")
    section["gpus"][0]["failures"] = {"nvmlDeviceGetNvLinkState": "NOT_SUPPORTED", "nvmlDeviceGetAttributes_v2": "NOT_SUPPORTED"}
    device = open_backend(section).discover().devices[0]
    assert device.attributes[INTERCONNECT] == "none"
    assert device.capacity["multiprocessors"] == "132"  # from the full-size MIG profile


def test_gpu_lost_during_discovery_of_optional_facts_skips_gpu(open_backend: OpenBackend) -> None:
    section = profile_section("dgx-h100")
    section["gpus"][5]["failures"] = {"nvmlDeviceGetNvLinkState": "GPU_IS_LOST"}
    names = [d.name for d in open_backend(section).discover().devices]
    assert "gpu-5" not in names and len(names) == 7


def test_library_missing_is_backend_unavailable() -> None:
    section = profile_section("t4")
    section["failures"] = {"nvmlInitWithFlags": "LIBRARY_NOT_FOUND"}
    with pytest.raises(BackendUnavailable, match="libnvidia-ml.so.1"):
        NvidiaBackend.from_profile(section, BackendSettings())
    assert fake_nvml.installed() is None


def test_no_gpus_is_backend_unavailable() -> None:
    section = profile_section("t4")
    section["gpus"] = []
    with pytest.raises(BackendUnavailable, match="no NVIDIA GPUs"):
        NvidiaBackend.from_profile(section, BackendSettings())


def test_from_host_without_driver_is_unavailable() -> None:
    fake_nvml.install(None)
    with pytest.raises(BackendUnavailable, match="not installed"):
        NvidiaBackend.from_host(BackendSettings())


def test_init_uses_no_gpus_flag(open_backend: OpenBackend) -> None:
    backend = open_backend("t4")
    assert backend.simulator is not None
    assert backend.simulator.init_flags == [1]  # NVML_INIT_FLAG_NO_GPUS


def test_profile_typo_is_a_profile_error() -> None:
    section = profile_section("t4")
    section["gpus"][0]["minorr"] = 3
    with pytest.raises(ProfileError, match=r"nvidia\.gpus\.0\.minorr"):
        NvidiaBackend.from_profile(section, BackendSettings())


def test_discover_command_with_dgx_h100(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from dra_driver.cli.main import main

    assert main(["discover", "--profile", "dgx-h100", "--vendors", "nvidia", "-o", "json", "--node-name", "n1"]) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    devices = [d for item in items for d in item["spec"].get("devices", [])]
    assert len(devices) == 8
    assert {d["capacity"]["memory"]["value"] for d in devices} == {"81559Mi"}
    fake_nvml.install(None)


def test_device_attributes_call_is_mig_only_like_real_nvml(open_backend: OpenBackend) -> None:
    import pynvml

    backend = open_backend("dgx-a100-mig")
    full = pynvml.nvmlDeviceGetHandleByIndex(4)  # MIG disabled
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetAttributes(full)
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(pynvml.nvmlDeviceGetHandleByIndex(0), 0)
    assert pynvml.nvmlDeviceGetAttributes(mig).multiprocessorCount > 0
    # The A100's whole-GPU SM count comes from its 7g.40gb profile (98 SMs usable under MIG).
    gpu4 = next(d for d in backend.discover().devices if d.name == "gpu-4")
    assert gpu4.capacity["multiprocessors"] == "98"


def test_over_long_product_name_is_cut_not_fatal(open_backend: OpenBackend) -> None:
    section = profile_section("dgx-h100")
    long_name = "NVIDIA H100 80GB HBM3 " + "é" * 34  # 90 bytes; NVML names may be up to 96
    section["models"]["long"] = {**section["models"][section["gpus"][0]["model"]], "name": long_name}
    section["gpus"][0]["model"] = "long"
    for partitioning in ("static", "dynamic"):
        backend = open_backend(copy.deepcopy(section), partitioning=partitioning)
        inventory = backend.discover()
        pool = render_pool(inventory, node_name="node-a")
        validate_slices(pool)  # the whole pool is publishable
        published = [d for d in inventory.devices if d.attributes["productName"] != "NVIDIA H100 80GB HBM3"]
        assert published and all(d.name.startswith("gpu-0") for d in published)
        cut = published[0].attributes["productName"]
        assert isinstance(cut, str) and long_name.startswith(cut) and len(cut.encode()) <= 64
        assert len({d.name.split("-")[1] for d in inventory.devices}) == 8  # every GPU still there


def test_duplicate_minor_skips_the_second_gpu_only(open_backend: OpenBackend) -> None:
    section = profile_section("dgx-h100")
    section["gpus"][2]["minor"] = section["gpus"][1]["minor"]
    inventory = open_backend(section).discover()
    names = [d.name for d in inventory.devices]
    assert len(names) == 7 and len(set(names)) == 7
    validate_slices(render_pool(inventory, node_name="node-a"))


def test_cuda_driver_version_unsupported_omits_only_that_attribute(open_backend: OpenBackend) -> None:
    section = profile_section("dgx-h100")
    section["failures"] = {"nvmlSystemGetCudaDriverVersion": "NOT_SUPPORTED"}
    devices = open_backend(section).discover().devices
    assert len(devices) == 8
    assert all("cudaDriverVersion" not in d.attributes and d.attributes["driverVersion"] == Version("580.159.4") for d in devices)


def test_fabric_attributes_keep_the_pool_within_limits(open_backend: OpenBackend) -> None:
    section = profile_section("dgx-h100")
    for gpu in section["gpus"]:
        gpu["fabric"] = {"clusterUuid": "5f0e3a2b-9c1d-4e7f-8a6b-0c2d4e6f8a10", "cliqueId": 1}
    inventory = open_backend(section, partitioning="dynamic").discover()
    full = next(d for d in inventory.devices if d.name == "gpu-0")
    assert len(full.attributes) + len(full.capacity) <= 32
    validate_slices(render_pool(inventory, node_name="node-a"))


def test_numa_node_from_sysfs_is_published_under_the_standard_name(open_backend: OpenBackend) -> None:
    """resource.kubernetes.io/numaNode (KEP-6072) from <device>/numa_node, on the GPU and its MIG devices; none when sysfs has none."""
    section = copy.deepcopy(profile_section("dgx-a100-mig"))
    section["gpus"][0]["numaNode"] = 1  # in MIG mode: its MIG devices carry it
    section["gpus"][4]["numaNode"] = 1  # a full GPU
    inventory = open_backend(section).discover()
    by_name = {d.name: d for d in inventory.devices}
    assert by_name["gpu-4"].attributes[NUMA_NODE] == 1
    mig_of_gpu0 = [d for d in inventory.devices if d.name.startswith("gpu-0-")]
    assert mig_of_gpu0 and all(d.attributes[NUMA_NODE] == 1 for d in mig_of_gpu0)
    assert NUMA_NODE not in by_name["gpu-5"].attributes
    validate_slices(render_pool(inventory, node_name="node-a"))  # still within the attribute limit per device
