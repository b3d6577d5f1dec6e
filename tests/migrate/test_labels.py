"""Label translations evaluated with the project's CEL layer against devices shaped like our slices."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.migrate.labels import Requirement, translate
from dra_driver.migrate.resources import DeviceKind, classify

cel = pytest.importorskip("dra_driver.cel", reason="CEL layer not importable")


def _kind(resource: str) -> DeviceKind:
    kind = classify(resource)
    assert isinstance(kind, DeviceKind)
    return kind


def _nvidia(product: str, memory_mi: int = 81559, architecture: str = "Hopper") -> Any:
    return cel.cel_device("gpu.nvidia.com", {
        "name": "gpu-0",
        "attributes": {"type": {"string": "gpu"}, "productName": {"string": product}, "architecture": {"string": architecture}},
        "capacity": {"memory": {"value": f"{memory_mi}Mi"}},
    })


def _amd(memory_mi: int, device_id: str = "0x74a1") -> Any:
    return cel.cel_device("gpu.amd.com", {
        "name": "gpu-1-128",
        "attributes": {"type": {"string": "amdgpu"}, "deviceID": {"string": device_id}, "productName": {"string": "AMD_Instinct_MI300X_OAM"}},
        "capacity": {"memory": {"value": f"{memory_mi}Mi"}, "computeUnits": {"value": "304"}},
    })


def _selector(label: str, values: tuple[str, ...], resource: str = "nvidia.com/gpu", operator: str = "In") -> Any:
    translation = translate(Requirement(label, operator, values), _kind(resource))
    assert translation.selector is not None, translation.reason
    return cel.compile_selector(translation.selector)


@pytest.mark.parametrize(
    ("label", "name"),
    [
        ("NVIDIA-A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"),  # table: keeps the real dashes
        ("NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB HBM3"),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "NVIDIA RTX PRO 6000 Blackwell Server Edition"),  # rule
        ("NVIDIA-A100-PCIE-40GB", "NVIDIA A100-PCIE-40GB"),  # rule: a '-' may be a real dash
    ],
)
def test_product_label_matches_exactly_the_named_gpu(label: str, name: str) -> None:
    selector = _selector("nvidia.com/gpu.product", (label,))
    assert selector.evaluate(_nvidia(name))
    assert not selector.evaluate(_nvidia(name + " X"))
    assert not selector.evaluate(_nvidia("NVIDIA L4"))


@pytest.mark.parametrize(
    ("label", "name"), [("NVIDIA-H200-NVL", "NVIDIA H200 NVL"), ("NVIDIA-GB200", "NVIDIA GB200"), ("NVIDIA-B200", "NVIDIA B200")]
)
def test_shipped_hopper_and_blackwell_products_are_exact_names(label: str, name: str) -> None:
    translation = translate(Requirement("nvidia.com/gpu.product", "In", (label,)), _kind("nvidia.com/gpu"))
    assert translation.selector is not None and ".matches(" not in translation.selector  # the table, not the dash rule
    selector = cel.compile_selector(translation.selector)
    assert selector.evaluate(_nvidia(name))
    assert not selector.evaluate(_nvidia(name.replace(" ", "-")))
    assert not selector.evaluate(_nvidia("NVIDIA H200"))


def test_not_in_negates() -> None:
    selector = _selector("nvidia.com/gpu.product", ("NVIDIA-L4", "Tesla-T4"), operator="NotIn")
    assert not selector.evaluate(_nvidia("Tesla T4"))
    assert selector.evaluate(_nvidia("NVIDIA H200"))


def test_memory_operators() -> None:
    assert _selector("nvidia.com/gpu.memory", ("81559",)).evaluate(_nvidia("x", 81559))
    assert not _selector("nvidia.com/gpu.memory", ("81559",)).evaluate(_nvidia("x", 81560))
    assert _selector("nvidia.com/gpu.memory", ("40000",), operator="Gt").evaluate(_nvidia("x", 40960))
    assert not _selector("nvidia.com/gpu.memory", ("40960",), operator="Gt").evaluate(_nvidia("x", 40960))
    assert _selector("nvidia.com/gpu.memory", ("50000",), operator="Lt").evaluate(_nvidia("x", 40960))


def test_family_ampere_includes_ada() -> None:
    selector = _selector("nvidia.com/gpu.family", ("ampere",))
    assert selector.evaluate(_nvidia("NVIDIA L4", architecture="Ada Lovelace"))
    assert selector.evaluate(_nvidia("NVIDIA A100-SXM4-40GB", architecture="Ampere"))
    assert not selector.evaluate(_nvidia("NVIDIA H100 80GB HBM3", architecture="Hopper"))


@pytest.mark.parametrize(("memory_mi", "expected"), [(196592, True), (196096, True), (197119, True), (197120, False), (196095, False)])
def test_amd_vram_label_is_the_rounded_gib_range(memory_mi: int, expected: bool) -> None:
    assert _selector("amd.com/gpu.vram", ("192G",), resource="amd.com/gpu").evaluate(_amd(memory_mi)) is expected


def test_amd_device_id() -> None:
    selector = _selector("amd.com/gpu.device-id", ("74A1",), resource="amd.com/gpu")
    assert selector.evaluate(_amd(196592))
    assert not selector.evaluate(_amd(196592, device_id="0x740f"))


@pytest.mark.parametrize(
    ("label", "values", "resource", "reason"),
    [
        ("nvidia.com/gpu.product", ("NVIDIA-A100-SXM4-40GB-SHARED",), "nvidia.com/gpu", "time-sliced"),
        ("nvidia.com/gpu.product", ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",), "nvidia.com/gpu", "MIG single-strategy"),
        ("nvidia.com/gpu.memory", ("81920",), "nvidia.com/mig-1g.10gb", "whole GPU"),
        ("nvidia.com/gpu.family", ("undefined",), "nvidia.com/gpu", "no known architecture"),
        ("nvidia.com/gpu.count", ("8",), "nvidia.com/gpu", "no device attribute"),
        ("amd.com/gpu.vram", ("192G",), "amd.com/cpx_nps4", "whole GPU"),
        ("nvidia.com/gpu.product", ("NVIDIA-L4",), "amd.com/gpu", "cannot constrain"),
    ],
)
def test_untranslatable_labels_say_why(label: str, values: tuple[str, ...], resource: str, reason: str) -> None:
    translation = translate(Requirement(label, "In", values), _kind(resource))
    assert translation.selector is None and reason in translation.reason


def test_exists_is_not_translated() -> None:
    translation = translate(Requirement("nvidia.com/gpu.product", "Exists", ()), _kind("nvidia.com/gpu"))
    assert translation.selector is None


def test_amd_product_name_label_is_the_attribute_value() -> None:
    """Both come from sysfs product_name with spaces as '_' (docs/attributes.md, AMD)."""
    translation = translate(Requirement("amd.com/gpu.product-name", "In", ("AMD_Instinct_MI300X_OAM", "AMD_Instinct_MI210")), _kind("amd.com/gpu"))
    assert translation.selector == 'device.attributes["gpu.amd.com"].productName in ["AMD_Instinct_MI300X_OAM", "AMD_Instinct_MI210"]'
