"""Node labels from GPU feature discovery / node labellers, translated to CEL on device attributes.

A label value describes the node; the selector describes the device. The
translation is only made when it is exact: the label's value determines the
attribute's value (or range) without guessing. Anything else is refused with a
reason and the label stays in the pod's placement.

Label rules (docs/migration.md, "Label translation"):
- nvidia.com/gpu.product: gpu-feature-discovery writes the NVML name with every
  space replaced by '-' (and appends "-SHARED" for time-sliced GPUs, "-MIG-<profile>"
  with the MIG single strategy). A '-' in the label is therefore either a space
  or a real '-' of the name. Names listed in _NVIDIA_PRODUCTS are mapped exactly
  ("NVIDIA-A100-SXM4-40GB" -> "NVIDIA A100-SXM4-40GB"); any other value becomes a
  regular expression in which each '-' matches either character.
- nvidia.com/gpu.memory: MiB from NVML, compared with capacity `memory`.
- nvidia.com/gpu.family: derived from the CUDA compute capability major version
  ("ampere" covers Ampere and Ada Lovelace, both 8.x), mapped to `architecture`.
- amd.com/gpu.device-id ("74a1"), amd.com/gpu.vram ("192G", whole GiB rounded to
  nearest), amd.com/gpu.cu-count, amd.com/compute-memory-partition ("cpx_nps4"),
  amd.com/gpu.product-name (sysfs product_name with '_' for spaces): our
  productName is the same string, normalised from the same sysfs file.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dra_driver.backend.vocabulary import AMD_DRIVER, NVIDIA_DRIVER
from dra_driver.cel.literals import cel_string
from dra_driver.migrate.resources import DeviceKind, attr, capacity

# NVML names (docs/attributes.md, "Shipped hardware profiles and their sources"); the label is the name with ' ' -> '-'.
_NVIDIA_PRODUCTS = (
    "NVIDIA A100-SXM4-40GB",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H200",
    "NVIDIA H200 NVL",
    "NVIDIA L4",
    "NVIDIA L40S",
    "Tesla T4",
    "NVIDIA B200",
    "NVIDIA GB200",
)
_NVIDIA_PRODUCT_BY_LABEL = {name.replace(" ", "-"): name for name in _NVIDIA_PRODUCTS}

# gpu-feature-discovery family (from the compute capability major) -> NVML architecture names.
_NVIDIA_FAMILIES: dict[str, tuple[str, ...]] = {
    "kepler": ("Kepler",),
    "maxwell": ("Maxwell",),
    "pascal": ("Pascal",),
    "volta": ("Volta",),
    "turing": ("Turing",),
    "ampere": ("Ampere", "Ada Lovelace"),
    "hopper": ("Hopper",),
    "blackwell": ("Blackwell",),
}

GPU_LABEL_PREFIXES = ("nvidia.com/", "amd.com/", "beta.amd.com/", "habana.ai/")
# NFD PCI vendor labels: NVIDIA 10de, AMD 1002, Habana 1da3.
_NFD_PCI = re.compile(r"^feature\.node\.kubernetes\.io/pci-[0-9a-f]{4}_(10de|1002|1da3)\.present$|"
                      r"^feature\.node\.kubernetes\.io/pci-(10de|1002|1da3)\.present$")


@dataclass(frozen=True)
class Requirement:
    """One node-placement condition: nodeSelector entries become operator In with one value."""

    label: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...]


@dataclass(frozen=True)
class Translation:
    selector: str | None  # the CEL selector, or None when not translatable
    reason: str = ""  # why not


class _NotExact(Exception):
    """A label value that has no exact device-attribute equivalent."""


Predicate = Callable[[str], str]
# (label values, selector operator, device kind) -> CEL condition; raises _NotExact.
_Rule = Callable[[Sequence[str], str, DeviceKind], str]


def is_gpu_label(label: str) -> bool:
    return label.startswith(GPU_LABEL_PREFIXES) or bool(_NFD_PCI.match(label))


def label_vendor(label: str) -> str | None:
    if label.startswith("nvidia.com/") or "10de" in label:
        return "nvidia"
    if label.startswith(("amd.com/", "beta.amd.com/")) or "1002" in label:
        return "amd"
    if label.startswith("habana.ai/") or "1da3" in label:
        return "gaudi"
    return None


def _combine(operator: str, values: Sequence[str], predicate: Predicate) -> str:
    parts = [predicate(value) for value in values]
    joined = parts[0] if len(parts) == 1 else "(" + " || ".join(parts) + ")"
    return joined if operator == "In" else f"!{joined}" if len(parts) > 1 else f"!({joined})"


def _in_list(lhs: str, operator: str, literals: Sequence[str]) -> str:
    if len(literals) == 1:
        return f"{lhs} {'==' if operator == 'In' else '!='} {literals[0]}"
    listed = "[" + ", ".join(literals) + "]"
    return f"{lhs} in {listed}" if operator == "In" else f"!({lhs} in {listed})"


def _nvidia_product(values: Sequence[str], operator: str, kind: DeviceKind) -> str:
    for value in values:
        if value.endswith("-SHARED"):
            raise _NotExact(f"{value!r} marks time-sliced GPUs (device-plugin sharing), which a selector cannot express")
        if "-MIG-" in value:
            raise _NotExact(f"{value!r} is a MIG single-strategy product label, not a GPU model")
    lhs = attr(NVIDIA_DRIVER, "productName")
    if all(value in _NVIDIA_PRODUCT_BY_LABEL for value in values):
        return _in_list(lhs, operator, [cel_string(_NVIDIA_PRODUCT_BY_LABEL[v]) for v in values])

    def predicate(value: str) -> str:
        if value in _NVIDIA_PRODUCT_BY_LABEL:
            return f"{lhs} == {cel_string(_NVIDIA_PRODUCT_BY_LABEL[value])}"
        pattern = "^" + "[ -]".join(re.escape(part) for part in value.split("-")) + "$"
        return f"{lhs}.matches({cel_string(pattern)})"

    return _combine(operator, values, predicate)


def _quantity_compare(lhs: str, quantity: str, op: str) -> str:
    return f"{lhs}.compareTo(quantity({cel_string(quantity)})) {op} 0"


def _int_values(values: Sequence[str], label: str) -> list[int]:
    try:
        return [int(value) for value in values]
    except ValueError:
        raise _NotExact(f"{label} values must be integers, got {list(values)}") from None


def _numeric(lhs: str, unit: str, label: str) -> _Rule:
    def translate(values: Sequence[str], operator: str, kind: DeviceKind) -> str:
        numbers = _int_values(values, label)
        if operator in ("Gt", "Lt"):
            return _quantity_compare(lhs, f"{numbers[0]}{unit}", ">" if operator == "Gt" else "<")
        return _combine(operator, [str(n) for n in numbers], lambda n: _quantity_compare(lhs, f"{n}{unit}", "=="))

    return translate


def _whole_device_only(translate: _Rule, what: str) -> _Rule:
    def wrapped(values: Sequence[str], operator: str, kind: DeviceKind) -> str:
        if kind.partition:
            raise _NotExact(f"the label gives the {what} of the whole GPU; a {kind.resource} device has less")
        return translate(values, operator, kind)

    return wrapped


def _nvidia_family(values: Sequence[str], operator: str, kind: DeviceKind) -> str:
    names: list[str] = []
    for value in values:
        if value not in _NVIDIA_FAMILIES:
            raise _NotExact(f"family {value!r} has no known architecture name")
        names.extend(_NVIDIA_FAMILIES[value])
    return _in_list(attr(NVIDIA_DRIVER, "architecture"), operator, [cel_string(n) for n in names])


def _amd_device_id(values: Sequence[str], operator: str, kind: DeviceKind) -> str:
    ids = []
    for value in values:
        if not re.fullmatch(r"[0-9a-fA-F]{4}", value):
            raise _NotExact(f"device id {value!r} is not a 4-digit hex PCI device id")
        ids.append(cel_string("0x" + value.lower()))
    return _in_list(attr(AMD_DRIVER, "deviceID"), operator, ids)


def _amd_product(values: Sequence[str], operator: str, kind: DeviceKind) -> str:
    """The labeller and the backend both take sysfs product_name with spaces as '_': the same string.

    (A board without that file has no label to translate, and its productName is the market name.)
    """
    return _in_list(attr(AMD_DRIVER, "productName"), operator, [cel_string(v) for v in values])


def _amd_vram(values: Sequence[str], operator: str, kind: DeviceKind) -> str:
    """"192G" is round(MiB / 1024): exactly the memory range [192Gi - 512Mi, 192Gi + 512Mi)."""
    lhs = capacity(AMD_DRIVER, "memory")
    if operator not in ("In", "NotIn"):
        raise _NotExact(f"operator {operator} on a 'G'-suffixed value")

    def predicate(value: str) -> str:
        match = re.fullmatch(r"(\d+)G", value)
        if not match:
            raise _NotExact(f"vram value {value!r} is not '<GiB>G'")
        gib = int(match[1])
        low, high = gib * 1024 - 512, gib * 1024 + 512
        return f"({_quantity_compare(lhs, f'{low}Mi', '>=')} && {_quantity_compare(lhs, f'{high}Mi', '<')})"

    return _combine(operator, values, predicate)


def _amd_mode(values: Sequence[str], operator: str, kind: DeviceKind) -> str:
    for value in values:
        if not re.fullmatch(r"(spx|dpx|tpx|qpx|cpx)_nps[1248]", value):
            raise _NotExact(f"{value!r} is not a <compute>_<memory> partition mode")
    return _in_list(attr(AMD_DRIVER, "partitionProfile"), operator, [cel_string(v) for v in values])


_RULES: dict[str, tuple[str, _Rule]] = {
    "nvidia.com/gpu.product": ("nvidia", _nvidia_product),
    "nvidia.com/gpu.memory": ("nvidia", _whole_device_only(_numeric(capacity(NVIDIA_DRIVER, "memory"), "Mi", "nvidia.com/gpu.memory"), "memory")),
    "nvidia.com/gpu.family": ("nvidia", _nvidia_family),
}
for _prefix in ("amd.com/", "beta.amd.com/"):
    _RULES.update(
        {
            f"{_prefix}gpu.device-id": ("amd", _amd_device_id),
            f"{_prefix}gpu.product-name": ("amd", _amd_product),
            f"{_prefix}gpu.vram": ("amd", _whole_device_only(_amd_vram, "memory")),
            f"{_prefix}gpu.cu-count": (
                "amd",
                _whole_device_only(_numeric(capacity(AMD_DRIVER, "computeUnits"), "", "cu-count"), "compute units"),
            ),
        }
    )
_RULES["amd.com/compute-memory-partition"] = ("amd", _amd_mode)


def translate(requirement: Requirement, kind: DeviceKind) -> Translation:
    """The selector that makes a `kind` request honour `requirement`, or why there is none."""
    rule = _RULES.get(requirement.label)
    if rule is None:
        return Translation(None, "no device attribute corresponds to this label")
    vendor, function = rule
    if vendor != kind.vendor:
        return Translation(None, f"a {vendor} label cannot constrain {kind.resource} devices")
    if requirement.operator in ("Exists", "DoesNotExist"):
        return Translation(None, f"operator {requirement.operator} tests the node, not a device value")
    if requirement.operator in ("Gt", "Lt") and len(requirement.values) != 1:
        return Translation(None, f"operator {requirement.operator} needs exactly one value")
    if requirement.operator not in ("In", "NotIn", "Gt", "Lt") or not requirement.values:
        return Translation(None, f"unsupported operator {requirement.operator!r} or no values")
    try:
        return Translation(function(requirement.values, requirement.operator, kind))
    except _NotExact as exc:
        return Translation(None, str(exc))
