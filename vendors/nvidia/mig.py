"""MIG through NVML: profiles and placements, existing MIG devices, creating and destroying instances.

Profiles and placements always come from NVML (nvmlDeviceGetGpuInstanceProfileInfo
for every NVML_GPU_INSTANCE_PROFILE_* value, then ...PossiblePlacements), never
from tables in code, so a new board or driver works without a code change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import pynvml

from dra_driver.common.logs import fields
from dra_driver_nvidia import nvml
from dra_driver_nvidia.nvml import DeviceAttributes, GpuInstanceProfileInfo, Handle, NvmlError, Placement

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MigProfile:
    info: GpuInstanceProfileInfo
    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class MigDevice:
    """An existing MIG device (static MIG)."""

    uuid: str
    gi_id: int
    ci_id: int
    profile: GpuInstanceProfileInfo
    placement: Placement
    attributes: DeviceAttributes | None
    memory_bytes: int


@dataclass(frozen=True)
class CreatedInstance:
    gi_id: int
    ci_id: int
    uuid: str


def device_name(minor: int, profile: str, profile_id: int, start: int) -> str:
    """Upstream's `gpu-%d-mig-%s-%d-%d`: minor, profile without dots, GI profile ID, placement start.

    '+' (as in "1g.10gb+me") is not allowed in a device name; it becomes '-'.
    """
    return f"gpu-{minor}-mig-{profile.replace('.', '').replace('+', '-')}-{profile_id}-{start}"


def read_profiles(handle: Handle) -> list[MigProfile]:
    """Every GPU instance profile this GPU supports, with its possible placements."""
    profiles: dict[int, MigProfile] = {}
    for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = nvml.gpu_instance_profile_info(handle, enum)
        except NvmlError as exc:
            if exc.not_supported or exc.not_found:
                continue  # this board has no such profile
            raise
        if info.id in profiles:
            continue
        placements = tuple(sorted(nvml.gpu_instance_possible_placements(handle, info.id)))
        profiles[info.id] = MigProfile(info, placements)
    return sorted(profiles.values(), key=lambda p: (p.info.slice_count, p.info.memory_mb, p.info.id))


def read_mig_devices(handle: Handle, profiles: dict[int, GpuInstanceProfileInfo]) -> list[MigDevice]:
    """The MIG devices that exist on a MIG-enabled GPU; an unreadable one is logged and skipped."""
    devices: list[MigDevice] = []
    for position in range(nvml.max_mig_device_count(handle)):
        try:
            mig = nvml.mig_device_handle(handle, position)
        except NvmlError as exc:
            if exc.not_found or exc.not_supported:
                continue  # empty slot
            raise
        try:
            devices.append(_read_mig_device(handle, mig, profiles))
        except (NvmlError, KeyError) as exc:
            log.warning("skipping MIG device", extra=fields(position=position, error=str(exc)))
    return devices


def _read_mig_device(handle: Handle, mig: Handle, profiles: dict[int, GpuInstanceProfileInfo]) -> MigDevice:
    gi_id = nvml.gpu_instance_id(mig)
    gi_info = nvml.gpu_instance_info(nvml.gpu_instance_by_id(handle, gi_id))
    try:
        attributes: DeviceAttributes | None = nvml.attributes(mig)
    except NvmlError:
        attributes = None
    return MigDevice(
        uuid=nvml.uuid(mig),
        gi_id=gi_id,
        ci_id=nvml.compute_instance_id(mig),
        profile=profiles[gi_info.profile_id],
        placement=gi_info.placement,
        attributes=attributes,
        memory_bytes=nvml.memory_total(mig),
    )


def read_compute_profiles(gi: Handle, _gi_profile_id: int = -1) -> tuple[nvml.ComputeInstanceProfileInfo, ...]:
    """The compute-instance profiles this GPU instance supports (the others answer NOT_SUPPORTED/NOT_FOUND).

    NVML is asked through the GPU instance; the unused GI profile ID makes this a `ComputeProfilesOf`.
    """
    found = []
    for enum in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            found.append(nvml.compute_instance_profile_info(gi, enum))
        except NvmlError as exc:
            if not (exc.not_supported or exc.not_found):
                raise
    return tuple(found)


# (GPU instance, its GI profile ID) -> the compute-instance profiles it supports
ComputeProfilesOf = Callable[[Handle, int], Sequence[nvml.ComputeInstanceProfileInfo]]


class ComputeProfiles:
    """Compute-instance profiles per (GPU, GI profile), read from NVML once instead of on every lookup.

    NVML answers them per GPU instance, but what it answers (IDs, slice counts, instance counts,
    shared engines) describes the GI *profile*: every GPU instance of one profile on one GPU gets the
    same list, and creating or destroying instances does not change it. Only a MIG mode change (or a
    driver that answers differently after a GPU reset) could, so the owner drops a GPU's entries when it
    switches that GPU's MIG mode, when an NVML call that used them fails, and on every discovery.
    Not locked: the backend uses it under its own lock.
    """

    def __init__(self) -> None:
        self._known: dict[tuple[str, int], tuple[nvml.ComputeInstanceProfileInfo, ...]] = {}

    def of(self, gpu_uuid: str, gi: Handle, gi_profile_id: int) -> tuple[nvml.ComputeInstanceProfileInfo, ...]:
        key = (gpu_uuid, gi_profile_id)
        known = self._known.get(key)
        if known is None:
            known = self._known[key] = read_compute_profiles(gi)
        return known

    def forget(self, gpu_uuid: str | None = None) -> None:
        """Drop one GPU's entries, or every entry."""
        if gpu_uuid is None:
            self._known.clear()
        else:
            self._known = {key: value for key, value in self._known.items() if key[0] != gpu_uuid}


def _full_compute_profile(profiles: Sequence[nvml.ComputeInstanceProfileInfo], slice_count: int) -> nvml.ComputeInstanceProfileInfo:
    """The compute-instance profile that spans the whole GPU instance (what `nvidia-smi mig -C` creates)."""
    best: nvml.ComputeInstanceProfileInfo | None = None
    for info in profiles:
        if info.slice_count <= slice_count and (best is None or info.slice_count > best.slice_count):
            best = info
    if best is None:
        raise NvmlError(
            "nvmlGpuInstanceGetComputeInstanceProfileInfo", pynvml.NVML_ERROR_NOT_SUPPORTED, "no compute instance profile fits the GPU instance"
        )
    return best


def find_instance(handle: Handle, profile_id: int, start: int, capacity: int = nvml.MAX_GPU_INSTANCES) -> Handle | None:
    """An existing GPU instance of this profile at this placement, if any (`capacity`: the profile's instanceCount)."""
    for gi in nvml.gpu_instances(handle, profile_id, capacity):
        if nvml.gpu_instance_info(gi).placement.start == start:
            return gi
    return None


def mig_uuid(handle: Handle, gi_id: int, ci_id: int) -> str:
    """The UUID of the MIG device backed by (GI, CI); found by walking the parent's MIG handles."""
    return mig_uuids(handle, {(gi_id, ci_id)})[(gi_id, ci_id)]


def mig_uuids(handle: Handle, wanted: Collection[tuple[int, int]], slots: int | None = None) -> dict[tuple[int, int], str]:
    """The UUIDs of the MIG devices backed by each (GI, CI) in `wanted`, in one walk of the parent's MIG handles
    (NVML has no lookup by ID: a claim's instances found one walk each cost a walk per instance). `slots`: the GPU's
    MIG device count if known (it is the board's: it never changes), else asked for."""
    left, found = set(wanted), {}
    for position in range(slots if slots is not None else nvml.max_mig_device_count(handle)):
        if not left:
            break
        try:
            mig = nvml.mig_device_handle(handle, position)
        except NvmlError as exc:
            if exc.not_found or exc.not_supported:
                continue
            raise
        key = (nvml.gpu_instance_id(mig), nvml.compute_instance_id(mig))
        if key in left:
            found[key] = nvml.uuid(mig)
            left.discard(key)
    if left:
        gi_id, ci_id = min(left)
        raise NvmlError("nvmlDeviceGetMigDeviceHandleByIndex", pynvml.NVML_ERROR_NOT_FOUND, f"no MIG device for GI {gi_id} CI {ci_id}")
    return found


def create_instance(
    handle: Handle, profile: MigProfile, placement: Placement, compute_profiles: ComputeProfilesOf = read_compute_profiles
) -> CreatedInstance:
    """Create (or reuse, for idempotent prepare) the GI at `placement` and one full-size CI in it."""
    existing = find_instance(handle, profile.info.id, placement.start, profile.info.instance_count)
    return create_instance_in(handle, profile, placement, existing, compute_profiles)


def create_instance_in(
    handle: Handle,
    profile: MigProfile,
    placement: Placement,
    gi: Handle | None,
    compute_profiles: ComputeProfilesOf,
    find_uuid: bool = True,
) -> CreatedInstance:
    """`create_instance` with the GI at the placement already looked up (None: there is none, create it).

    A GI created here whose compute instance then fails is destroyed again before the error is
    raised, so a failure leaves the placement as it was. Without `find_uuid` the UUID is left empty
    for the caller to look up with `mig_uuids` (once for all the instances it creates on a GPU).
    """
    made = gi is None
    if gi is None:
        gi = nvml.create_gpu_instance(handle, profile.info.id, placement)
    try:
        gi_id = nvml.gpu_instance_info(gi).id
        ci_profile = _full_compute_profile(compute_profiles(gi, profile.info.id), profile.info.slice_count)
        # A GI made just now has no compute instance: only a reused one (idempotent prepare) is asked for its own.
        existing = [] if made else nvml.compute_instances(gi, ci_profile)
        ci = existing[0] if existing else nvml.create_compute_instance(gi, ci_profile.id)
        ci_id = nvml.compute_instance_id_of(ci)
        return CreatedInstance(gi_id, ci_id, mig_uuid(handle, gi_id, ci_id) if find_uuid else "")
    except NvmlError:
        if made:
            _destroy_quietly(gi, profile.info.id, compute_profiles)
        raise


def _destroy_quietly(gi: Handle, gi_profile_id: int, compute_profiles: ComputeProfilesOf) -> None:
    try:
        destroy_gpu_instance_tree(gi, gi_profile_id, compute_profiles)
    except NvmlError as exc:
        # Nothing records it as ours now: it stays, published as someone else's, until an admin removes it.
        log.error("cannot destroy the GPU instance of a failed MIG creation; remove it with nvidia-smi mig -dci/-dgi",
                  extra=fields(profile=gi_profile_id, error=str(exc)))  # fmt: skip


def destroy_instance(handle: Handle, gi_id: int, profile_id: int, start: int, compute_profiles: ComputeProfilesOf = read_compute_profiles) -> bool:
    """Destroy a GI (and its CIs) if it is still the one we created; False when already gone."""
    try:
        gi = nvml.gpu_instance_by_id(handle, gi_id)
    except NvmlError as exc:
        if exc.not_found or exc.not_supported:
            return False
        raise
    info = nvml.gpu_instance_info(gi)
    if info.profile_id != profile_id or info.placement.start != start:
        # The ID was reused for another instance after ours went away: not ours to destroy.
        return False
    destroy_gpu_instance_tree(gi, profile_id, compute_profiles)
    return True


def destroy_gpu_instance_tree(gi: Handle, gi_profile_id: int, compute_profiles: ComputeProfilesOf = read_compute_profiles) -> None:
    for info in compute_profiles(gi, gi_profile_id):
        for ci in nvml.compute_instances(gi, info):
            nvml.destroy_compute_instance(ci)
    nvml.destroy_gpu_instance(gi)


def live_instances(handle: Handle, profiles: list[MigProfile]) -> list[tuple[Handle, nvml.GpuInstanceInfo]]:
    """Every GPU instance on this GPU with its info."""
    found = []
    for profile in profiles:
        for gi in nvml.gpu_instances(handle, profile.info.id, profile.info.instance_count):
            found.append((gi, nvml.gpu_instance_info(gi)))
    return found
