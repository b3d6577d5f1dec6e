"""The schema of the `amd:` section of a hardware profile (what the simulated amdsmi reports).

A profile names GPU models once (ASIC identity, VRAM, CUs, partition capabilities)
and lists the GPUs of the node, each referring to a model and adding what is
per-board: PCI address, DRM minors, NUMA node, XGMI hive, current partition mode.
Values are what amdsmi 7.0.2 returns on real hardware (docs/attributes.md, shipped profile sources).
Validated with pydantic so a typo in a user's profile is an error naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dra_driver.backend.support import parse_profile_section
from dra_driver.backend.sysfs import BDF_PATTERN

ComputeMode = Literal["SPX", "DPX", "TPX", "QPX", "CPX"]
MemoryMode = Literal["NPS1", "NPS2", "NPS4", "NPS8"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AcceleratorProfile(_Strict):
    """One entry of amdsmi_get_gpu_accelerator_partition_profile_config()['profiles']."""

    type: ComputeMode
    num_partitions: int = Field(ge=1, le=8)
    memory_caps: list[MemoryMode]


class DriverInfo(_Strict):
    name: str = "amdgpu"
    version: str
    date: str = "N/A"


class GpuModel(_Strict):
    """What amdsmi reports for one GPU model (the whole GPU, SPX)."""

    market_name: str
    # The amdgpu driver's sysfs product_name (from the board FRU); None: the file is absent.
    sysfs_product_name: str | None = None
    vendor_id: str = "0x1002"
    vendor_name: str = "Advanced Micro Devices Inc. [AMD/ATI]"
    device_id: str  # hex string, as amdsmi_get_gpu_asic_info returns it ("0x74a1")
    rev_id: str = "0x00"
    target_graphics_version: str  # "gfx942"
    num_compute_units: int = Field(ge=1)
    vram_size_mb: int = Field(ge=1)  # amdsmi_get_gpu_vram_info()['vram_size'], MB
    # amdsmi_get_power_info()['power_limit'], W: the scale of the simulated power readings
    power_limit_w: int = Field(default=750, ge=1)
    # Partitioning; empty lists mean the ASIC has no partition modes (CDNA2).
    accelerator_profiles: list[AcceleratorProfile] = Field(default_factory=list)
    default_profile_index: int = 0
    memory_partition_caps: list[MemoryMode] = Field(default_factory=list)


class GpuEntry(_Strict):
    """One physical GPU (one amdsmi socket) on the node."""

    model: str
    bdf: str
    card: int = Field(ge=0)
    render: int = Field(ge=128)  # /dev/dri/renderD<N>; partition k uses render + k
    numa_node: int = Field(default=0, ge=0)
    pcie_root: str | None = None  # "pci0000:00": the host bridge above the GPU in sysfs
    serial: str = "0x0000000000000000"
    uuid: str | None = None
    hive_id: int = 0  # XGMI hive id; 0 = not in a hive
    xgmi_node_id: int = 0
    compute_partition: ComputeMode | None = None  # None: ASIC without partition modes
    memory_partition: MemoryMode | None = None

    @field_validator("bdf")
    @classmethod
    def _bdf_format(cls, value: str) -> str:
        if not BDF_PATTERN.match(value):
            raise ValueError(f"{value!r} must be a lower-case PCI address such as 0000:0c:00.0")
        return value


class AmdProfile(_Strict):
    driver: DriverInfo
    models: dict[str, GpuModel]
    gpus: list[GpuEntry]
    # Simulate real hardware where a memory-mode change only takes effect after
    # an amdgpu reload: the set call succeeds but the mode stays as it was.
    memory_reload_required: bool = False
    # Simulate ROCm < 6.4.1, where amdsmi_get_gpu_enumeration_info reported the
    # primary's DRM minors for every partition (AMD SMI Python API docs).
    partitions_report_primary_minors: bool = False

    @model_validator(mode="after")
    def _references(self) -> AmdProfile:
        for index, gpu in enumerate(self.gpus):
            if gpu.model not in self.models:
                raise ValueError(f"gpus[{index}].model {gpu.model!r} is not defined under models ({', '.join(self.models)})")
        bdfs = [gpu.bdf for gpu in self.gpus]
        if len(set(bdfs)) != len(bdfs):
            raise ValueError("gpus: two GPUs have the same bdf")
        for field_name in ("card", "render"):
            self._check_minor_ranges(field_name)
        return self

    def _max_partitions(self, gpu: GpuEntry) -> int:
        return max((p.num_partitions for p in self.models[gpu.model].accelerator_profiles), default=1)

    def _check_minor_ranges(self, field_name: str) -> None:
        """Partition k of a GPU uses <field> + k, so each GPU's range must be its own."""
        taken: dict[int, int] = {}  # minor -> index of the GPU using it
        for index, gpu in enumerate(self.gpus):
            first = getattr(gpu, field_name)
            count = self._max_partitions(gpu)
            for minor in range(first, first + count):
                if minor in taken:
                    other = taken[minor]
                    raise ValueError(
                        f"gpus[{index}].{field_name} {first} overlaps gpus[{other}].{field_name} "
                        f"{getattr(self.gpus[other], field_name)}: each GPU uses {field_name} .. {field_name}+{count - 1} "
                        f"for its up to {count} partitions; space them at least {count} apart"
                    )
                taken[minor] = index


def parse_profile(section: Mapping[str, Any]) -> AmdProfile:
    """Validate an `amd:` profile section; ProfileError names the field that is wrong."""
    return parse_profile_section(AmdProfile, section, "amd", "AMD profile")
