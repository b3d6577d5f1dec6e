"""Which device-plugin resources we know, and the DRA request each one becomes.

Attribute names follow our vendor backends (docs/attributes.md): NVIDIA
`type` ("gpu" | "mig") and `profile`; AMD `computePartition` /
`memoryPartition` (lower case, "cpx" / "nps4"); Gaudi devices are all alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dra_driver.cel.literals import cel_string
from dra_driver.backend.vocabulary import AMD_DRIVER, AMD_PARTITION_CLASS, GAUDI_DRIVER, MIG_CLASS, NVIDIA_DRIVER, VENDOR_DOMAINS


# HAMi's GPU-slicing resources: next to nvidia.com/gpu they ask for a slice (memory, cores) of a shared GPU.
HAMI_SLICES = frozenset({"nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage", "nvidia.com/priority"})
HAMI_REASON = (
    "HAMi GPU slicing ({resources}): nvidia.com/gpu asks for a slice of a GPU shared with other pods, not a whole "
    "one; a DRA claim's devices are exclusive, so converting it would change what the pod gets. DRA shares a GPU "
    "through one ResourceClaim with a GpuConfig sharing strategy that the pods reference (docs/migration.md, "
    "time-sliced GPUs); left as is"
)
_INTEL_GPU = re.compile(r"^gpu\.intel\.com/(?:i915|xe|i915_monitoring|xe_monitoring|millicores|memory\.max|tiles)\Z")
INTEL_GPU_REASON = (
    "Intel GPU device-plugin resource; this driver publishes no Intel GPUs (Intel's own DRA driver, gpu.intel.com, "
    "does): left as is, write its claim by hand or use --strategy extended-resource with that driver's classes"
)
# Device-plugin resources of other accelerators this driver does not publish (matched as exact names anywhere)
_OTHER_ACCELERATORS = re.compile(r"^(?:aws\.amazon\.com/neuron(?:core|device)?|google\.com/tpu)\Z")

_MIG = re.compile(r"^nvidia\.com/mig-(?P<profile>\d+g\.\d+gb)\Z")
_AMD_PARTITION = re.compile(r"^amd\.com/(?P<compute>spx|dpx|tpx|qpx|cpx)_(?P<memory>nps1|nps2|nps4|nps8)\Z")


def attr(driver: str, name: str) -> str:
    return f"device.attributes[{cel_string(driver)}].{name}"


def capacity(driver: str, name: str) -> str:
    return f"device.capacity[{cel_string(driver)}].{name}"


@dataclass(frozen=True)
class DeviceKind:
    """What one device-plugin resource means in DRA terms."""

    resource: str  # "nvidia.com/mig-1g.10gb"
    vendor: str  # "nvidia" | "amd" | "gaudi"
    driver: str  # the DRA driver publishing such devices
    device_class: str  # class used by the claims strategy
    selectors: tuple[str, ...]  # CEL the request adds to the class (e.g. the MIG profile)
    short: str  # DNS-label fragment for request names: "gpu", "mig-1g-10gb", "cpx-nps4"
    partition: bool  # a slice of a device (MIG, AMD partition) rather than a whole one
    extended_class: str  # DeviceClass name for the extended-resource strategy
    extended_selectors: tuple[str, ...]  # full selector list of a generated extended class


@dataclass(frozen=True)
class Unsupported:
    """A device-plugin resource we recognise but deliberately do not convert."""

    resource: str
    reason: str


def _driver_is(driver: str, device_type: str | None = None) -> str:
    """The selector every extended class starts with: this driver's devices (of one `type`)."""
    test = f"device.driver == {cel_string(driver)}"
    return test if device_type is None else f"{test} && {attr(driver, 'type')} == {cel_string(device_type)}"


def _whole(resource: str, vendor: str, driver: str, short: str, device_type: str | None) -> DeviceKind:
    """A resource for one whole device: the driver's own class, no extra selectors."""
    return DeviceKind(
        resource=resource,
        vendor=vendor,
        driver=driver,
        device_class=driver,
        selectors=(),
        short=short,
        partition=False,
        extended_class=f"extended.{driver}",
        extended_selectors=(_driver_is(driver, device_type),),
    )


# Resource name -> its whole-device kind (the shipped class of each driver is named after it).
_WHOLE_DEVICES: dict[str, DeviceKind] = {
    kind.resource: kind
    for kind in (
        _whole("nvidia.com/gpu", "nvidia", NVIDIA_DRIVER, "gpu", "gpu"),
        _whole("amd.com/gpu", "amd", AMD_DRIVER, "gpu", "amdgpu"),
        _whole("habana.ai/gaudi", "gaudi", GAUDI_DRIVER, "gaudi", None),
    )
}


def _mig(resource: str, profile: str, per_profile_classes: frozenset[str]) -> DeviceKind:
    per_profile = f"mig-{profile}.nvidia.com"
    profile_selector = f"{attr(NVIDIA_DRIVER, 'profile')} == {cel_string(profile)}"
    selectors: tuple[str, ...]
    if per_profile in per_profile_classes:
        device_class, selectors = per_profile, ()
    else:
        device_class, selectors = MIG_CLASS, (profile_selector,)
    return DeviceKind(
        resource=resource,
        vendor="nvidia",
        driver=NVIDIA_DRIVER,
        device_class=device_class,
        selectors=selectors,
        short="mig-" + profile.replace(".", "-"),
        partition=True,
        extended_class=f"extended.mig-{profile}.nvidia.com",
        extended_selectors=(_driver_is(NVIDIA_DRIVER, "mig"), profile_selector),
    )


def _amd_partition(resource: str, compute: str, memory: str) -> DeviceKind:
    """`amd.com/<compute>_<memory>`: one partition of a GPU in that mode (ROCm device plugin naming).

    SPX is the whole GPU, so `spx_*` asks for a whole GPU in that memory mode.
    """
    mode = (
        f"{attr(AMD_DRIVER, 'computePartition')} == {cel_string(compute)} && "
        f"{attr(AMD_DRIVER, 'memoryPartition')} == {cel_string(memory)}"
    )
    whole = compute == "spx"
    device_type = "amdgpu" if whole else "amdgpu-partition"
    return DeviceKind(
        resource=resource,
        vendor="amd",
        driver=AMD_DRIVER,
        device_class=AMD_DRIVER if whole else AMD_PARTITION_CLASS,
        selectors=(mode,),
        short=f"{compute}-{memory}",
        partition=not whole,
        extended_class=f"extended.{compute}-{memory}.gpu.amd.com",
        extended_selectors=(_driver_is(AMD_DRIVER, device_type), mode),
    )


def classify(resource: str, per_profile_classes: frozenset[str] = frozenset()) -> DeviceKind | Unsupported | None:
    """The DRA meaning of a resource name; None when it is not a device-plugin resource we know."""
    if resource in _WHOLE_DEVICES:
        return _WHOLE_DEVICES[resource]
    if match := _MIG.match(resource):
        return _mig(resource, match["profile"], per_profile_classes)
    if match := _AMD_PARTITION.match(resource):
        return _amd_partition(resource, match["compute"], match["memory"])
    if resource in HAMI_SLICES:
        return Unsupported(resource, HAMI_REASON.format(resources=resource))
    if _INTEL_GPU.match(resource):
        return Unsupported(resource, INTEL_GPU_REASON)
    if resource.endswith(".shared") and resource.split("/", 1)[0] in VENDOR_DOMAINS:
        return Unsupported(
            resource,
            "time-sliced replica of a device (device-plugin sharing with renameByDefault); DRA shares a device "
            "through a GpuConfig sharing strategy in the claim, which this tool does not write",
        )
    if resource.split("/", 1)[0] in VENDOR_DOMAINS or _OTHER_ACCELERATORS.match(resource):
        return Unsupported(resource, "device-plugin resource this tool does not know how to map")
    return None


# A known resource name somewhere in text (a Helm template source, which is never parsed)
_NAME_IN_TEXT = re.compile(
    r"nvidia\.com/(?:gpu|mig-)|amd\.com/(?:gpu|[scdtq]px_nps)|habana\.ai/gaudi|gpu\.intel\.com/(?:i915|xe)"
    r"|aws\.amazon\.com/neuron|google\.com/tpu"
)


def mentions_resource(text: str) -> bool:
    return _NAME_IN_TEXT.search(text) is not None


def is_known_resource_name(text: str) -> bool:
    """A device-plugin resource name we know exactly (not just its domain: `nvidia.com/gpu.product` is a label).

    Used where a name can be a key or a value anywhere in an object (TrainJob resourcesPerNode, SparkApplication
    `gpu.name`, a ResourceQuota key), so that no known request passes silently.
    """
    return bool(
        text in _WHOLE_DEVICES or text in HAMI_SLICES or _MIG.match(text) or _AMD_PARTITION.match(text)
        or _INTEL_GPU.match(text) or _OTHER_ACCELERATORS.match(text)
        or (text.endswith(".shared") and text.removesuffix(".shared") in _WHOLE_DEVICES)
    )
