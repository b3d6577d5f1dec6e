"""Intent -> the classes, CEL selectors, constraint and config a claim needs, each with what it means.

Only shipped DeviceClasses (deviceclasses/) and published attribute names
(docs/attributes.md) are used, so the claim works with this driver's slices.
Values are spliced into CEL only after intent.py checked them against narrow
patterns; they are still written as quoted, escaped CEL strings.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dra_driver.cel.literals import cel_string
from dra_driver.template.intent import GROUPINGS, DeviceWant, Intent, Problems, Sharing
from dra_driver.template.known import KnownKind
from dra_driver.backend.vocabulary import (
    AMD_DRIVER,
    AMD_PARTITION_CLASS,
    DOMAIN,
    MIG_CLASS,
    GAUDI_DRIVER,
    INTERCONNECT_DOMAIN,
    NVIDIA_DRIVER,
    PCIE_ROOT,
)

NVIDIA_CONFIG_API = "resource.nvidia.com/v1beta1"  # upstream's opaque config group (dra-driver-nvidia-gpu api/nvidia.com/resource/v1beta1)


@dataclass(frozen=True)
class VendorInfo:
    driver: str
    whole_class: str
    product_attribute: str  # what --model matches
    partition_class: str | None = None


VENDOR_INFO = {
    "nvidia": VendorInfo(NVIDIA_DRIVER, NVIDIA_DRIVER, "productName", MIG_CLASS),
    "amd": VendorInfo(AMD_DRIVER, AMD_DRIVER, "productName", AMD_PARTITION_CLASS),
    "gaudi": VendorInfo(GAUDI_DRIVER, GAUDI_DRIVER, "model"),
}
ANY_CLASS = "accelerator.dra-driver.io"
CLASS_MEANINGS = {
    NVIDIA_DRIVER: "whole NVIDIA GPUs",
    MIG_CLASS: "NVIDIA MIG devices",
    AMD_DRIVER: "whole AMD GPUs",
    AMD_PARTITION_CLASS: "AMD GPU partitions",
    GAUDI_DRIVER: "Intel Gaudi accelerators",
    ANY_CLASS: "any whole accelerator, any vendor",
}
# matchAttribute per --same; numaNode is published by the AMD driver only (docs/attributes.md).
GROUP_ATTRIBUTES = {"interconnect": (INTERCONNECT_DOMAIN, None), "pcie-root": (PCIE_ROOT, None), "numa": ("gpu.amd.com/numaNode", "amd")}


@dataclass(frozen=True)
class Selector:
    expression: str
    meaning: str


@dataclass(frozen=True)
class Choice:
    """One resolved DeviceWant: what goes into `exactly` or one `firstAvailable` entry."""

    name: str  # subrequest name (firstAvailable only)
    vendor: str  # nvidia | amd | gaudi | any
    device_class: str
    class_meaning: str
    count: int
    selectors: tuple[Selector, ...]
    want: DeviceWant


@dataclass(frozen=True)
class Resolved:
    choices: tuple[Choice, ...]
    constraint: tuple[str, tuple[str, ...], str] | None  # (matchAttribute, requests it applies to, meaning)
    configs: tuple[tuple[tuple[str, ...], dict[str, Any]], ...]  # (requests, opaque parameters)


def _vendor_of(want: DeviceWant, where: str, problems: Problems, kinds: Sequence[KnownKind], checked: bool) -> tuple[str, str | None]:
    """The vendor the want implies (MIG: nvidia, partition: amd, model: who makes it) and the model as published."""
    implied = "nvidia" if want.mig else "amd" if want.partition else None
    vendor = want.vendor
    if implied and vendor not in ("any", implied):
        problems.add(where, f"{'a MIG profile' if want.mig else 'an AMD partition'} needs vendor {implied}, not {vendor}")
    vendor = implied or vendor
    if not want.model:
        return vendor, None
    makers = [k for k in kinds if want.model.lower() in k.product.lower() and vendor in ("any", k.vendor)]
    found = sorted({k.vendor for k in makers})
    elsewhere = sorted({k.vendor for k in kinds if want.model.lower() in k.product.lower()} - {vendor})
    if implied and not found and elsewhere:  # --partition cpx --model H100: the model is right, the wish is not
        kind = "MIG profiles are NVIDIA-only" if want.mig else "partitions (cpx, dpx, qpx) are AMD-only"
        problems.add(
            where,
            f"{kind}, and {want.model} is made by {'/'.join(elsewhere)}; drop {'--mig' if want.mig else '--partition'}, or ask for a model made by "
            f"{implied}",
        )
        return vendor, want.model
    if len(found) > 1:
        problems.add(f"{where} model", f"{want.model!r} matches products of {', '.join(found)}; add the vendor")
        return vendor, want.model
    if found:
        product = makers[0].product
        start = product.lower().index(want.model.lower())
        return found[0], product[start : start + len(want.model)]  # the published spelling: h100 -> H100
    if checked:
        known = sorted({k.product for k in kinds if vendor in ("any", k.vendor)})
        problems.add(
            f"{where} model",
            f"no known {'' if vendor == 'any' else vendor + ' '}product matches {want.model!r}; known: {', '.join(known)} (--no-hardware-check for "
            "hardware newer than the shipped profiles)",
        )
    elif vendor == "any":
        problems.add(f"{where} model", f"{want.model!r} is not a known product, so its vendor is unknown; add the vendor")
    return vendor, want.model


def _memory_selector(vendor: str, memory: str) -> Selector:
    capacity = "device.capacity[device.driver]" if vendor == "any" else f"device.capacity[{cel_string(VENDOR_INFO[vendor].driver)}]"
    # Guarded: a device without a memory capacity (a Gaudi of unknown model) must not be a CEL error.
    expression = f'"memory" in {capacity} && {capacity}.memory.compareTo(quantity({cel_string(memory)})) >= 0'
    return Selector(expression, f"at least {memory} of device memory")


def _family_selector(families: tuple[str, ...]) -> Selector:
    attrs = f"device.attributes[{cel_string(DOMAIN)}]"
    if len(families) == 1:
        test, meaning = f"{attrs}.family == {cel_string(families[0])}", f"architecture family {families[0]}"
    else:
        test, meaning = f"{attrs}.family in [{', '.join(map(cel_string, families))}]", f"architecture family one of {', '.join(families)}"
    return Selector(f'"family" in {attrs} && {test}', meaning)


def _partition_selectors(want: DeviceWant, shipped: Collection[str]) -> tuple[str, str, list[Selector]]:
    """Class, its meaning, and the selectors for a MIG profile or an AMD partition mode."""
    if want.mig:
        per_profile = f"mig-{want.mig}.nvidia.com"
        if per_profile in shipped:
            return per_profile, f"NVIDIA MIG devices of profile {want.mig}", []
        attrs = f"device.attributes[{cel_string(NVIDIA_DRIVER)}]"
        return MIG_CLASS, CLASS_MEANINGS[MIG_CLASS], [Selector(f"{attrs}.profile == {cel_string(want.mig)}", f"MIG profile {want.mig}")]
    assert want.partition is not None
    compute, memory = want.partition
    attrs = f"device.attributes[{cel_string(AMD_DRIVER)}]"
    selectors = [Selector(f"{attrs}.computePartition == {cel_string(compute)}", f"compute partition mode {compute.upper()}")]
    if memory:
        selectors.append(Selector(f"{attrs}.memoryPartition == {cel_string(memory)}", f"memory partition mode {memory.upper()}"))
    return AMD_PARTITION_CLASS, CLASS_MEANINGS[AMD_PARTITION_CLASS], selectors


def _slug(want: DeviceWant, vendor: str) -> str:
    words = want.model or want.mig or ("-".join(p for p in want.partition if p) if want.partition else "") or "-".join(want.families) or vendor
    slug = re.sub(r"[^a-z0-9]+", "-", words.lower()).strip("-")[:40]
    return slug or "devices"


def resolve_choice(want: DeviceWant, index: int, problems: Problems, kinds: Sequence[KnownKind], shipped: Collection[str], checked: bool) -> Choice:
    where = "first choice" if index == 0 else f"--fallback #{index}"
    vendor, model = _vendor_of(want, where, problems, kinds, checked)
    selectors: list[Selector] = []
    if want.mig or want.partition:
        device_class, meaning, partition_selectors = _partition_selectors(want, shipped)
    elif vendor == "any":
        device_class, meaning, partition_selectors = ANY_CLASS, CLASS_MEANINGS[ANY_CLASS], []
    else:
        device_class = VENDOR_INFO[vendor].whole_class
        meaning, partition_selectors = CLASS_MEANINGS[device_class], []
    if device_class not in shipped:
        problems.add(where, f"DeviceClass {device_class} is not installed with this dra-driver; reinstall it (deviceclasses/)")
    if model and vendor != "any":
        info = VENDOR_INFO[vendor]
        expression = f"device.attributes[{cel_string(info.driver)}].{info.product_attribute}.contains({cel_string(model)})"
        selectors.append(Selector(expression, f"{'model' if info.product_attribute == 'model' else 'product name'} contains {model}"))
    selectors += partition_selectors
    if want.families:
        selectors.append(_family_selector(want.families))
    if want.memory:
        selectors.append(_memory_selector(vendor, want.memory))
    return Choice(_slug(want, vendor), vendor, device_class, meaning, want.count, tuple(selectors), replace(want, vendor=vendor, model=model))


def _unique_names(choices: list[Choice]) -> list[Choice]:
    seen: dict[str, int] = {}
    out = []
    for choice in choices:
        seen[choice.name] = seen.get(choice.name, 0) + 1
        name = choice.name if seen[choice.name] == 1 else f"{choice.name}-{seen[choice.name]}"
        out.append(Choice(name, choice.vendor, choice.device_class, choice.class_meaning, choice.count, choice.selectors, choice.want))
    return out


# Why --sharing is NVIDIA only, said per vendor with what to do instead.
NO_SHARING = {
    "amd": "AMD GPUs have no sharing setting: amdgpu already runs the processes of several containers on one GPU at once "
           "(pods referencing one ResourceClaim share it), and offers no per-process memory or compute limit a driver "
           "could apply; for a hard split ask for a partition (--partition cpx)",
    "gaudi": "Gaudi accelerators cannot be shared: the habanalabs driver gives one process at a time a compute context "
             "on a device; ask for as many devices as processes",
    "any": "add --vendor nvidia or a model",
}  # fmt: skip


def _sharing_parameters(sharing: Sharing, kind: str) -> dict[str, Any]:
    body: dict[str, Any] = {"strategy": sharing.strategy}
    if sharing.strategy == "TimeSlicing" and sharing.interval and kind == "GpuConfig":  # MIG devices take no interval
        body["timeSlicingConfig"] = {"interval": sharing.interval}
    if sharing.strategy == "MPS":
        mps: dict[str, Any] = {}
        if sharing.threads is not None:
            mps["defaultActiveThreadPercentage"] = sharing.threads
        if sharing.pinned_memory:
            mps["defaultPinnedDeviceMemoryLimit"] = sharing.pinned_memory
        if mps:
            body["mpsConfig"] = mps
    return {"apiVersion": NVIDIA_CONFIG_API, "kind": kind, "sharing": body}


def resolve(intent: Intent, problems: Problems, kinds: Sequence[KnownKind], shipped: Collection[str], checked: bool) -> Resolved:
    choices = _unique_names([resolve_choice(w, i, problems, kinds, shipped, checked) for i, w in enumerate(intent.wants)])
    prioritized = len(choices) > 1
    constraint = None
    if intent.same:
        constraint = _constraint(intent, choices, prioritized, problems)
    configs: list[tuple[tuple[str, ...], dict[str, Any]]] = []
    if intent.sharing:
        if intent.sharing.interval not in (None, "Default") and all(choice.want.mig for choice in choices):
            problems.add(
                "--sharing",
                "a time-slice interval applies to whole GPUs and every choice is a MIG device (the driver "
                "refuses it at prepare); use time-slicing without an interval, or mps",
            )
        for choice in choices:
            if choice.vendor != "nvidia":
                problems.add(
                    "--sharing",
                    f"sharing is NVIDIA's GpuConfig ({NVIDIA_CONFIG_API}); {choice.name} is "
                    f"{'any vendor' if choice.vendor == 'any' else choice.vendor}: {NO_SHARING[choice.vendor]}",
                )
                continue
            kind = "MigDeviceConfig" if choice.want.mig else "GpuConfig"
            requests = (f"{intent.request}/{choice.name}",) if prioritized else (intent.request,)
            configs.append((requests, _sharing_parameters(intent.sharing, kind)))
    if intent.share_memory:
        for choice in choices:
            if choice.vendor != "nvidia" or choice.want.mig:
                problems.add(
                    "--share-memory",
                    f"{choice.name}: a share of GPU memory is taken of a whole NVIDIA GPU published for "
                    "several claims (--consumable-gpu-memory); add --vendor nvidia or an NVIDIA model, without --mig",
                )
        if intent.admin_access:
            problems.add("--share-memory", "admin access takes no share; drop one of the two")
    if intent.admin_access and prioritized:
        problems.add("--admin-access", "firstAvailable entries cannot ask for admin access (the API has no adminAccess there); drop the fallbacks")
    return Resolved(tuple(choices), constraint, tuple(configs))


def _constraint(intent: Intent, choices: Sequence[Choice], prioritized: bool, problems: Problems) -> tuple[str, tuple[str, ...], str] | None:
    """matchAttribute for --same, on the requests (or firstAvailable entries) whose devices publish the attribute."""
    assert intent.same is not None
    attribute, only = GROUP_ATTRIBUTES[intent.same]
    others = sorted({c.vendor for c in choices if c.vendor != only})
    if only and others:
        problems.add("--same", f"{intent.same}: only {only} devices publish {attribute}; choose the vendor {only} or use --same pcie-root")
        return None
    # MIG devices publish no interconnect domain (MIG does no NVLink peer traffic): a constraint on them never holds.
    grouped = [c for c in choices if not (intent.same == "interconnect" and c.want.mig)]
    if not grouped:
        problems.add(
            "--same", "interconnect: MIG devices publish no interconnect domain (they do no NVLink peer traffic); use --same pcie-root, or whole GPUs"
        )
        return None
    if not prioritized:
        requests: tuple[str, ...] = (intent.request,)
    else:
        requests = tuple(f"{intent.request}/{c.name}" for c in grouped) if len(grouped) < len(choices) else (intent.request,)
    meaning = f"all devices on {GROUPINGS[intent.same]} ({attribute} equal)"
    if len(grouped) < len(choices):
        meaning += "; not for the MIG choices, which publish no interconnect domain"
    return attribute, requests, meaning
