"""Schema of the `nvidia:` section of a hardware profile (the fake NVML's input).

Every value is something real NVML reports on a real machine (names, memory,
MIG profile table, placements), so the production code above the fake library
sees what it would see on the hardware. The schema is strict (unknown keys
are errors) so a typo in a user's profile fails loudly with its path.
Documented for users in vendors/nvidia/profiles/README.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dra_driver.common.errors import ProfileError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class Placements(_Strict):
    starts: list[int]  # valid placement starts, in memory slices
    size: int  # memory slices one instance occupies


class GpuInstanceProfile(_Strict):
    """One row of `nvidia-smi mig -lgip` plus its `-lgipp` placements."""

    profile: int = Field(ge=0, lt=0x12)  # NVML_GPU_INSTANCE_PROFILE_* enum value
    id: int  # profile ID as nvidia-smi prints it (19, 20, 15, 14, 9, 5, 0)
    name: str  # "MIG 1g.10gb"
    sliceCount: int
    instanceCount: int
    multiprocessors: int
    copyEngines: int
    decoders: int
    encoders: int
    jpegEngines: int
    ofaEngines: int
    memoryMB: int
    p2p: bool = False
    placements: Placements


class MigModel(_Strict):
    maxDevices: int = 7
    memorySlices: int = 8
    gpuInstanceProfiles: list[GpuInstanceProfile]


class NvLinkModel(_Strict):
    version: int  # NVML_NVLINK_VERSION_* enum (4 = 3.0 on A100, 6 = 4.0 on H100)
    links: int  # links that report NVML_FEATURE_ENABLED


class GpuModel(_Strict):
    name: str  # nvmlDeviceGetName
    architecture: int  # nvmlDeviceArchitecture_t
    brand: int = 14  # nvmlBrandType_t (14 = NVML_BRAND_NVIDIA)
    cudaComputeCapability: tuple[int, int]
    # The board's SM count, for the reader: NVML gives it for MIG devices only (nvmlDeviceGetAttributes),
    # so the simulation never reports it for a whole GPU either.
    multiprocessors: int | None = None
    memoryMiB: int  # nvmlDeviceGetMemoryInfo().total / 2**20
    pciDeviceId: int
    pciSubSystemId: int = 0
    nvlink: NvLinkModel | None = None
    mig: MigModel | None = None  # None: nvmlDeviceGetMigMode is NOT_SUPPORTED
    # Ampere (A100/A30): nvmlDeviceSetMigMode only sets the *pending* mode, reporting activation
    # status RESET_REQUIRED; the change takes effect at the next GPU reset. Hopper and later switch at once.
    migModeNeedsReset: bool = False
    # nvmlDeviceGetEnforcedPowerLimit; the simulated power draw moves between ~12 % (idle) and ~80 % of it.
    powerLimitW: int = 400


class MigDeviceSpec(_Strict):
    """An existing MIG device (GPU instance + one full-size compute instance)."""

    profileId: int  # GI profile ID (19, 9, ...), as `nvidia-smi mig -cgi` takes
    start: int  # placement start, in memory slices
    uuid: str  # "MIG-..."


class FabricSpec(_Strict):
    clusterUuid: str  # 32 hex digits (16 bytes), dashes allowed
    cliqueId: int
    state: int = 3  # NVML_GPU_FABRIC_STATE_COMPLETED
    status: int = 0  # nvmlReturn_t of the fabric probe


class GpuSpec(_Strict):
    model: str  # key into `models`
    uuid: str
    pciBusId: str  # "00000000:1B:00.0" (NVML busId format)
    pcieRoot: str | None = None  # "pci0000:1a"; written into the simulated sysfs tree
    numaNode: int | None = Field(default=None, ge=0)  # written as <device>/numa_node beside pcieRoot
    minor: int
    migEnabled: bool = False
    migDevices: list[MigDeviceSpec] = Field(default_factory=list)
    fabric: FabricSpec | None = None
    # C symbol -> NVML error name (e.g. nvmlDeviceGetName: GPU_IS_LOST); the call fails for this GPU.
    failures: dict[str, str] = Field(default_factory=dict)


class NvidiaSection(_Strict):
    driverVersion: str  # nvmlSystemGetDriverVersion, e.g. "580.159.04"
    cudaDriverVersion: int  # nvmlSystemGetCudaDriverVersion, major*1000 + minor*10
    models: dict[str, GpuModel]
    gpus: list[GpuSpec]
    # C symbol -> NVML error name for calls without a device (e.g. nvmlInitWithFlags: LIBRARY_NOT_FOUND).
    failures: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_references(self) -> NvidiaSection:
        for position, gpu in enumerate(self.gpus):
            if gpu.model not in self.models:
                raise ValueError(f"gpus[{position}].model {gpu.model!r} is not one of models: {sorted(self.models)}")
            model = self.models[gpu.model]
            if (gpu.migEnabled or gpu.migDevices) and model.mig is None:
                raise ValueError(f"gpus[{position}]: model {gpu.model!r} has no `mig` section, so MIG cannot be enabled")
            if gpu.migDevices and not gpu.migEnabled:
                raise ValueError(f"gpus[{position}]: migDevices need migEnabled: true")
        return self


def parse_section(section: Mapping[str, Any]) -> NvidiaSection:
    """Validate a profile's `nvidia:` section; errors name the offending key path."""
    try:
        return NvidiaSection.model_validate(dict(section))
    except ValidationError as exc:
        problems = "; ".join(
            f"nvidia.{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" for error in exc.errors()
        )
        raise ProfileError(f"invalid nvidia profile section: {problems}") from exc
