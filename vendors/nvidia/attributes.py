"""Turn GpuInfo / MIG records into model Devices and CounterSets with upstream-compatible names.

Names and attributes follow the NVIDIA DRA driver (gpu.nvidia.com): full GPUs
`gpu-<minor>`, MIG devices `gpu-<minor>-mig-<profile>-<profileId>-<start>`,
counter sets `gpu-<minor>-counter-set`; docs/attributes.md lists every key.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from dra_driver.common.errors import DeviceError
from dra_driver.common.logs import fields
from dra_driver.model import quantity
from dra_driver.model.device import AttributeValue, CapacityPolicy, CounterConsumption, CounterSet, Device, Version
from dra_driver.model.validation import MAX_ATTRIBUTES_AND_CAPACITIES, MAX_VALUE_LENGTH
from dra_driver.backend.vocabulary import NUMA_NODE, PCI_BUS_ID, PCIE_ROOT, common_attributes, interconnect_domain
from dra_driver_nvidia.discovery import GpuInfo, SystemInfo
from dra_driver_nvidia.mig import MigDevice, MigProfile, device_name
from dra_driver_nvidia.nvml import GpuInstanceProfileInfo, Placement

log = logging.getLogger(__name__)
VENDOR = "nvidia"
# Capacity name -> counter name (counter names must be DNS labels).
ENGINE_COUNTERS = {
    "multiprocessors": "multiprocessors",
    "copyEngines": "copy-engines",
    "decoders": "decoders",
    "encoders": "encoders",
    "jpegEngines": "jpeg-engines",
    "ofaEngines": "ofa-engines",
}


def semver(version: str) -> Version:
    """Masterminds-style normalisation as upstream does: "580.159.04" -> 580.159.4, "9.0" -> 9.0.0."""
    parts = [int(part) for part in version.strip().split(".")[:3] if part.isdigit()]
    parts += [0] * (3 - len(parts))
    return Version(".".join(str(part) for part in parts))


def family(architecture: str) -> str:
    return architecture.lower().replace(" ", "-")


def counter_set_name(gpu: GpuInfo) -> str:
    return f"{gpu.name}-counter-set"


def _engine_capacity(info: GpuInstanceProfileInfo, multiprocessors: int | None = None) -> dict[str, str]:
    return {
        "multiprocessors": quantity.from_count(multiprocessors if multiprocessors is not None else info.multiprocessors),
        "copyEngines": quantity.from_count(info.copy_engines),
        "decoders": quantity.from_count(info.decoders),
        "encoders": quantity.from_count(info.encoders),
        "jpegEngines": quantity.from_count(info.jpeg_engines),
        "ofaEngines": quantity.from_count(info.ofa_engines),
    }


def _shared_attributes(gpu: GpuInfo, system: SystemInfo) -> dict[str, AttributeValue]:
    """What a GPU and its MIG devices have in common."""
    attributes: dict[str, AttributeValue] = {
        "productName": gpu.product_name,
        "brand": gpu.brand,
        "architecture": gpu.architecture,
        "cudaComputeCapability": semver(gpu.compute_capability),
        "driverVersion": semver(system.driver_version),
        "index": gpu.index,
        "minor": gpu.minor,
        PCI_BUS_ID: gpu.pci_bus_id,
    }
    if system.cuda_driver_version is not None:
        attributes["cudaDriverVersion"] = semver(system.cuda_driver_version)
    if gpu.pcie_root:
        attributes[PCIE_ROOT] = gpu.pcie_root
    if gpu.numa_node is not None:
        attributes[NUMA_NODE] = gpu.numa_node
    return attributes


def _largest_profile(profiles: list[MigProfile]) -> GpuInstanceProfileInfo | None:
    return max((p.info for p in profiles), key=lambda info: (info.slice_count, info.memory_mb), default=None)


def _full_gpu_capacity(gpu: GpuInfo, profiles: list[MigProfile]) -> dict[str, str]:
    capacity = {"memory": quantity.from_bytes(gpu.memory_bytes)}
    largest = _largest_profile(profiles)
    if largest is not None:
        # NVML reports SM and engine counts only as MIG data (nvmlDeviceGetAttributes works on
        # MIG handles only), so a whole GPU gets its full-size profile's counts, as upstream;
        # a GPU without MIG publishes none of them.
        capacity.update(_engine_capacity(largest))
    return capacity


def gpu_device(gpu: GpuInfo, system: SystemInfo, node_name: str, profiles: list[MigProfile]) -> Device:
    attributes: dict[str, AttributeValue] = {"type": "gpu", "uuid": gpu.uuid, **_shared_attributes(gpu, system)}
    interconnect, domain = "none", None
    if gpu.nvlink_links:
        interconnect = "nvlink"
        domain = gpu.fabric_clique or interconnect_domain("nvlink", node_name)
        attributes["nvlinkLinks"] = gpu.nvlink_links
        if gpu.nvlink_version:
            attributes["nvlinkVersion"] = semver(gpu.nvlink_version)
    if gpu.fabric_clique and gpu.fabric_cluster is not None and gpu.fabric_clique_id is not None:
        # The combined form (one equality selects a clique) plus its parts, so a claim can ask
        # for "same NVLink cluster" or compare clique IDs without string slicing.
        attributes["nvlinkClique"] = gpu.fabric_clique
        attributes["nvlinkClusterUUID"] = gpu.fabric_cluster
        attributes["nvlinkCliqueID"] = gpu.fabric_clique_id
    attributes.update(common_attributes(VENDOR, family(gpu.architecture), False, interconnect, domain, gpu.nvlink_links))
    return checked(Device(name=gpu.name, attributes=attributes, capacity=_full_gpu_capacity(gpu, profiles)))


# Consumable GPU memory (a node flag): a claim takes at least 1 GiB, in whole MiB (the unit of the MPS pinned
# memory limit that enforces it); a request naming no amount takes all of it, so it gets the GPU to itself.
SHARE_MIN_MIB = 1024
SHARE_STEP = "1Mi"


def shareable(device: Device, memory_bytes: int) -> Device:
    """The whole GPU offered to several claims at once, each consuming part of its memory.

    Memory is its only capacity then: the scheduler charges every allocation the whole of a capacity without a
    request policy, so the engine counts a whole GPU publishes would let no second claim in.
    """
    whole_mib = memory_bytes >> 20
    if whole_mib < SHARE_MIN_MIB:
        return device
    device.capacity = {"memory": device.capacity["memory"]}
    device.allow_multiple_allocations = True
    device.capacity_policies["memory"] = CapacityPolicy(
        default=quantity.from_mebibytes(whole_mib), min=quantity.from_mebibytes(SHARE_MIN_MIB), step=SHARE_STEP
    )
    return device


def _mig_attributes(gpu: GpuInfo, system: SystemInfo, profile: str) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {"type": "mig", **_shared_attributes(gpu, system)}
    attributes["parentUUID"] = gpu.uuid
    attributes["profile"] = profile
    # MIG devices do not take part in NVLink peer traffic.
    attributes.update(common_attributes(VENDOR, family(gpu.architecture), True))
    return attributes


def static_mig_device(gpu: GpuInfo, system: SystemInfo, mig: MigDevice) -> Device:
    attributes = _mig_attributes(gpu, system, mig.profile.name)
    attributes["uuid"] = mig.uuid
    sms = mig.attributes.multiprocessors if mig.attributes else None
    capacity = {"memory": quantity.from_bytes(mig.memory_bytes), **_engine_capacity(mig.profile, sms)}
    name = device_name(gpu.minor, mig.profile.name, mig.profile.id, mig.placement.start)
    return checked(Device(name=name, attributes=attributes, capacity=capacity))


def _profile_counters(info: GpuInstanceProfileInfo, placement: Placement) -> dict[str, str]:
    counters = {ENGINE_COUNTERS[key]: value for key, value in _engine_capacity(info).items()}
    counters["memory"] = quantity.from_mebibytes(info.memory_mb)
    for memory_slice in range(placement.start, placement.start + placement.size):
        counters[f"memory-slice-{memory_slice}"] = "1"
    return counters


def _engine_counts(info: GpuInstanceProfileInfo) -> tuple[int, ...]:
    return (info.multiprocessors, info.copy_engines, info.decoders, info.encoders, info.jpeg_engines, info.ofa_engines)


def counter_set(
    gpu: GpuInfo, profiles: list[MigProfile], memory_slices: int, taken: Sequence[tuple[GpuInstanceProfileInfo, Placement]] = ()
) -> CounterSet:
    """What one GPU has to share among the partitions we may create (= what the full GPU consumes).

    `taken` are GPU instances the driver does not own (created by an admin): their engines,
    memory and memory slices are left out, so no allocation can count on them.
    """
    largest = _largest_profile(profiles)
    assert largest is not None, "counter sets exist only for GPUs with MIG profiles"
    engines = [total - sum(_engine_counts(info)[i] for info, _ in taken) for i, total in enumerate(_engine_counts(largest))]
    counters = {name: quantity.from_count(max(count, 0)) for name, count in zip(ENGINE_COUNTERS.values(), engines)}
    used_mib = sum(info.memory_mb for info, _ in taken)
    counters["memory"] = quantity.from_bytes(max(gpu.memory_bytes - (used_mib << 20), 0))
    busy = {s for _, placement in taken for s in range(placement.start, placement.start + placement.size)}
    for memory_slice in range(memory_slices):
        if memory_slice not in busy:
            counters[f"memory-slice-{memory_slice}"] = "1"
    return CounterSet(name=counter_set_name(gpu), counters=counters)


def memory_slice_count(profiles: list[MigProfile]) -> int:
    return max((p.start + p.size for profile in profiles for p in profile.placements), default=0)


def dynamic_gpu_device(gpu: GpuInfo, system: SystemInfo, node_name: str, profiles: list[MigProfile], counters: CounterSet) -> Device:
    device = gpu_device(gpu, system, node_name, profiles)
    device.consumes_counters = [CounterConsumption(counters.name, dict(counters.counters))]
    return device


def dynamic_mig_device(gpu: GpuInfo, system: SystemInfo, profile: MigProfile, placement: Placement) -> Device:
    info = profile.info
    capacity = {"memory": quantity.from_mebibytes(info.memory_mb), **_engine_capacity(info)}
    return checked(
        Device(
            name=device_name(gpu.minor, info.name, info.id, placement.start),
            attributes=_mig_attributes(gpu, system, info.name),
            capacity=capacity,
            consumes_counters=[CounterConsumption(counter_set_name(gpu), _profile_counters(info, placement))],
        )
    )


def _fit_value(device: str, key: str, value: AttributeValue) -> AttributeValue | None:
    """A string over the API's 64-byte limit is cut (NVML names may be 96 bytes); a version is dropped.

    Either way one device's odd value never makes the API server reject the whole pool.
    """
    text = value.value if isinstance(value, Version) else value if isinstance(value, str) else None
    if text is None or len(text.encode()) <= MAX_VALUE_LENGTH:
        return value
    if isinstance(value, Version):
        log.warning("dropping over-long attribute", extra=fields(device=device, attribute=key, value=text))
        return None
    cut = text.encode()[:MAX_VALUE_LENGTH].decode(errors="ignore").rstrip()
    log.warning("truncating over-long attribute", extra=fields(device=device, attribute=key, value=text, published=cut))
    return cut


def checked(device: Device) -> Device:
    """Fit values into the API limits, and refuse a device over 32 attributes+capacities (it would be rejected on publish)."""
    for key, value in list(device.attributes.items()):
        fitted = _fit_value(device.name, key, value)
        if fitted is None:
            del device.attributes[key]
        else:
            device.attributes[key] = fitted
    total = len(device.attributes) + len(device.capacity)
    if total > MAX_ATTRIBUTES_AND_CAPACITIES:
        raise DeviceError(device.name, f"has {total} attributes and capacities; at most {MAX_ATTRIBUTES_AND_CAPACITIES} are allowed")
    return device

