"""Every shipped DeviceClass against the simulated hardware profiles: what it must and must not match."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

from dra_driver.cel import CelDevice, cel_device
from dra_driver.cel.classes import ClassSelectors, load_device_classes, parse_device_class, shipped_classes_dir
from dra_driver.common.errors import ValidationError
from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.model import render_pool
from dra_driver.backend.registry import open_backends
from dra_driver.backend.interface import BackendSettings

PROFILE_VENDOR = {
    "dgx-h100": "nvidia", "dgx-a100-mig": "nvidia", "h200": "nvidia", "l4": "nvidia", "t4": "nvidia",
    "h200-nvl": "nvidia", "b200": "nvidia", "gb200": "nvidia",
    "mi300x": "amd", "mi300x-cpx": "amd", "mi250x": "amd", "mi210": "amd", "mi325x": "amd",
    "gaudi2-hls": "gaudi", "gaudi3-hls": "gaudi", "gaudi3-pcie": "gaudi",
}  # fmt: skip
PROFILES = sorted(PROFILE_VENDOR)


def _render(profile: str, root: Path) -> list[CelDevice]:
    vendor = PROFILE_VENDOR[profile]
    try:
        importlib.import_module(f"dra_driver_{vendor}.backend")
    except ImportError as exc:  # another helper's backend may not be installed yet
        pytest.skip(f"{vendor} backend not importable: {exc}")
    settings = BackendSettings(node_name="node-a", sysfs_root=root / "sys", dev_root=root / "dev", state_dir=root / "state")
    opened = open_backends(settings, profile=load_profile(profile), vendors=[vendor])
    try:
        assert opened.backends, [str(u) for u in opened.unavailable]
        devices: list[CelDevice] = []
        for backend in opened.backends:
            for slice_ in render_pool(backend.discover(), "node-a"):
                devices.extend(cel_device(slice_["spec"]["driver"], d) for d in slice_["spec"].get("devices", []))
        return devices
    finally:
        opened.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[CelDevice]]:
    return {name: _render(name, tmp_path_factory.mktemp(name)) for name in PROFILES}


@pytest.fixture(scope="module")
def classes() -> dict[str, ClassSelectors]:
    return load_device_classes()


def _matched(device_class: ClassSelectors, fleet: dict[str, list[CelDevice]]) -> dict[str, int]:
    """Per profile, how many devices the class matches; any runtime error fails the test."""
    counts = {name: sum(1 for d in devices if device_class.matches(d)) for name, devices in fleet.items()}
    return {name: n for name, n in counts.items() if n}


def _count(fleet: dict[str, list[CelDevice]], profile: str, attribute: str, value: object) -> int:
    return sum(1 for d in fleet[profile] if d.attribute(d.driver, attribute) == value)


# class -> the profiles whose devices it must match (all devices of that kind) — every other
# profile must have zero matches.
EXPECTED_PROFILES = {
    "gpu.nvidia.com": {"dgx-h100", "dgx-a100-mig", "h200", "h200-nvl", "b200", "gb200", "l4", "t4"},
    "extended.gpu.nvidia.com": {"dgx-h100", "dgx-a100-mig", "h200", "h200-nvl", "b200", "gb200", "l4", "t4"},
    "mig.nvidia.com": {"dgx-a100-mig"},
    "mig-1g.5gb.nvidia.com": {"dgx-a100-mig"},
    "mig-2g.10gb.nvidia.com": {"dgx-a100-mig"},
    "mig-3g.20gb.nvidia.com": {"dgx-a100-mig"},
    "gpu.amd.com": {"mi300x", "mi325x", "mi250x", "mi210"},
    "extended.gpu.amd.com": {"mi300x", "mi325x", "mi250x", "mi210"},
    "partition.gpu.amd.com": {"mi300x-cpx"},
    "gaudi.intel.com": {"gaudi2-hls", "gaudi3-hls", "gaudi3-pcie"},
    "extended.gaudi.intel.com": {"gaudi2-hls", "gaudi3-hls", "gaudi3-pcie"},
    "accelerator.dra-driver.io": set(PROFILES) - {"mi300x-cpx"},
    "large-memory.dra-driver.io": {"dgx-h100", "h200", "h200-nvl", "b200", "gb200", "mi300x", "mi325x", "gaudi2-hls", "gaudi3-hls", "gaudi3-pcie"},
    "hopper-or-cdna3.dra-driver.io": {"dgx-h100", "h200", "h200-nvl", "mi300x", "mi300x-cpx", "mi325x"},
    "ampere-or-cdna2.dra-driver.io": {"dgx-a100-mig", "mi250x", "mi210"},
    "nvlink.dra-driver.io": {"dgx-h100", "dgx-a100-mig", "h200", "b200", "gb200"},
    "xgmi.dra-driver.io": {"mi300x", "mi300x-cpx", "mi325x", "mi250x", "mi210"},
    # PCIe cards without a visible scale-up fabric (H200 NVL without bridges, HL-338) are not scale-up.
    "scale-up.dra-driver.io": set(PROFILES) - {"l4", "t4", "h200-nvl", "gaudi3-pcie"},
}


def test_every_shipped_class_has_an_expectation(classes: dict[str, ClassSelectors]) -> None:
    mig_profiles = {n for n in classes if n.startswith("mig-")}
    assert set(classes) - mig_profiles <= set(EXPECTED_PROFILES)
    assert {"mig-1g.10gb.nvidia.com", "mig-3g.40gb.nvidia.com", "mig-7g.80gb.nvidia.com", "mig-1g.5gb.nvidia.com"} <= mig_profiles


@pytest.mark.parametrize("name", sorted(EXPECTED_PROFILES))
def test_class_matches_exactly_the_expected_profiles(name: str, classes: dict[str, ClassSelectors], fleet: dict[str, list[CelDevice]]) -> None:
    assert set(_matched(classes[name], fleet)) == EXPECTED_PROFILES[name]


def test_vendor_classes_split_full_devices_from_partitions(classes: dict[str, ClassSelectors], fleet: dict[str, list[CelDevice]]) -> None:
    for profile, devices in fleet.items():
        for device in devices:
            kind = device.attribute(device.driver, "type")
            assert classes["gpu.nvidia.com"].matches(device) == (device.driver == "gpu.nvidia.com" and kind == "gpu")
            assert classes["mig.nvidia.com"].matches(device) == (device.driver == "gpu.nvidia.com" and kind == "mig")
            assert classes["partition.gpu.amd.com"].matches(device) == (kind == "amdgpu-partition")
            partition = device.attribute("dra-driver.io", "partition")
            assert classes["accelerator.dra-driver.io"].matches(device) == (partition is not None and not partition), profile


def test_mig_profile_classes_match_only_their_profile(classes: dict[str, ClassSelectors], fleet: dict[str, list[CelDevice]]) -> None:
    for name, device_class in classes.items():
        if not name.startswith("mig-"):
            continue
        profile = name[len("mig-") : -len(".nvidia.com")]
        matched = [d for devices in fleet.values() for d in devices if device_class.matches(d)]
        assert len(matched) == _count(fleet, "dgx-a100-mig", "profile", profile)
        assert all(d.attribute("gpu.nvidia.com", "profile") == profile for d in matched)


def test_large_memory_threshold_is_80_gigabytes(classes: dict[str, ClassSelectors]) -> None:
    large = classes["large-memory.dra-driver.io"]

    def device(memory: str) -> CelDevice:
        return cel_device("gpu.example.com", {"name": "d", "capacity": {"memory": {"value": memory}}})

    assert large.matches(device("80G")) and large.matches(device("81559Mi"))  # H100 80GB reports 81559Mi
    assert not large.matches(device("79999999999"))
    assert not large.matches(cel_device("gpu.example.com", {"name": "no-memory"}))


def test_cross_vendor_classes_are_guarded_against_foreign_devices(classes: dict[str, ClassSelectors]) -> None:
    bare = cel_device("other.example.com", {"name": "bare", "attributes": {"type": {"string": "gpu"}}})
    for name, device_class in classes.items():
        assert device_class.matches(bare) is False, name  # never a runtime error


def test_cross_vendor_selectors_are_groupable(classes: dict[str, ClassSelectors]) -> None:
    # explain evaluates once per group of devices that agree on the keys a selector reads.
    for name, device_class in classes.items():
        assert all(s.referenced_keys is not None for s in device_class.compiled()), name


def test_extended_resource_names(classes: dict[str, ClassSelectors]) -> None:
    assert classes["extended.gpu.nvidia.com"].spec.extended_resource_name == "nvidia.com/gpu"
    assert classes["extended.gpu.amd.com"].spec.extended_resource_name == "amd.com/gpu"
    assert classes["extended.gaudi.intel.com"].spec.extended_resource_name == "habana.ai/gaudi"
    assert sum(1 for c in classes.values() if c.spec.extended_resource_name) == 3


@pytest.mark.parametrize("consumable_capacity", [False, True])
def test_the_api_server_accepts_every_shipped_class(consumable_capacity: bool) -> None:
    """explain trusts the shipped classes and compiles their selectors only when a claim uses
    one (sources/classes.py merge_classes): this is the check it no longer runs on every call."""
    from dra_driver.allocator import CelMatcher
    from dra_driver.sources.classes import shipped_class_documents
    from dra_driver.model.resource_v1 import DeviceClass as ClassObject
    from dra_driver.model.resource_v1_validation import class_spec_errors
    from dra_driver.sources.claims import parse_object

    matcher = CelMatcher(consumable_capacity=consumable_capacity)
    documents = shipped_class_documents()
    assert len(documents) >= 5
    for doc in documents:
        parsed = parse_object(doc, "shipped")
        assert isinstance(parsed, ClassObject), parsed
        assert class_spec_errors(parsed, doc["metadata"]["name"], matcher.compile_problem) == []


def test_kustomization_lists_every_yaml_once() -> None:
    directory = shipped_classes_dir()
    listed = yaml.safe_load((directory / "kustomization.yaml").read_text())["resources"]
    on_disk = sorted(p.name for p in directory.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == on_disk and len(set(listed)) == len(listed)
    for path in on_disk:
        document = yaml.safe_load((directory / path).read_text())
        assert document["apiVersion"] == "resource.k8s.io/v1"
        assert f"{document['metadata']['name']}.yaml" == path


class TestParsing:
    def test_unknown_field_is_named(self) -> None:
        with pytest.raises(ValidationError, match="spec.selector"):
            parse_device_class({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "x"}, "spec": {"selector": []}})

    def test_bad_expression_is_named_with_its_index(self) -> None:
        obj = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "bad"},
            "spec": {"selectors": [{"cel": {"expression": "true"}}, {"cel": {"expression": "device.nme == 1"}}]},
        }
        with pytest.raises(ValidationError, match=r"spec.selectors\[1\].cel.expression"):
            parse_device_class(obj)

    def test_runtime_error_names_class_and_selector(self) -> None:
        obj = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "strict"},
            "spec": {"selectors": [{"cel": {"expression": 'device.attributes["a.io"].x == 1'}}]},
        }
        device_class = parse_device_class(obj)
        with pytest.raises(Exception, match="class strict selector #0"):
            device_class.matches(cel_device("a.io", {"name": "d"}))

    def test_load_from_directory_rejects_duplicates(self, tmp_path: Path) -> None:
        doc = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "dup"}}
        (tmp_path / "a.yaml").write_text(yaml.safe_dump(doc))
        (tmp_path / "b.yaml").write_text(yaml.safe_dump(doc))
        with pytest.raises(ValidationError, match="duplicate"):
            load_device_classes([tmp_path])

    def test_env_var_points_at_another_directory(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        (tmp_path / "kustomization.yaml").write_text("resources: [only.yaml]\n")
        doc = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "only"}}
        (tmp_path / "only.yaml").write_text(yaml.safe_dump(doc))
        monkeypatch.setenv("DRA_DRIVER_DEVICECLASSES", str(tmp_path))
        assert list(load_device_classes()) == ["only"]




def test_the_class_names_the_vocabulary_declares_are_shipped() -> None:
    """migrate and template write these names into claims: each must be a class the driver ships."""
    from dra_driver.backend import vocabulary
    from dra_driver.sources.classes import shipped_class_documents

    shipped = {document["metadata"]["name"] for document in shipped_class_documents()}
    declared = {vocabulary.NVIDIA_DRIVER, vocabulary.AMD_DRIVER, vocabulary.GAUDI_DRIVER, vocabulary.MIG_CLASS, vocabulary.AMD_PARTITION_CLASS}
    assert declared - shipped == set()
