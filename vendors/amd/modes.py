"""Partition modes: a compute mode (SPX..CPX) paired with a memory mode (NPS1..NPS8).

The valid pairs come from what the library reports for each GPU (accelerator
partition profiles with their memory caps, intersected with the memory
partition caps), not from a table here: the firmware decides (AMD SMI partition docs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

COMPUTE_MODES = ("SPX", "DPX", "TPX", "QPX", "CPX")
MEMORY_MODES = ("NPS1", "NPS2", "NPS4", "NPS8")


@dataclass(frozen=True, order=True)
class Mode:
    compute: str  # "CPX"
    memory: str  # "NPS4"
    partitions: int  # number of partitions (XCPs) the GPU shows in this mode

    @property
    def key(self) -> str:
        """DNS-label form used in device and counter names: "cpx-nps4"."""
        return f"{self.compute}-{self.memory}".lower()

    @property
    def profile(self) -> str:
        """The ROCm driver's partitionProfile value: "cpx_nps4"."""
        return f"{self.compute}_{self.memory}".lower()

    @property
    def is_whole_gpu(self) -> bool:
        return self.partitions == 1


def modes_from_caps(profile_config: Mapping[str, Any] | None, memory_caps: Sequence[str] | None) -> tuple[list[Mode], Mode | None]:
    """All valid modes of a GPU and its default mode, from amdsmi's reported caps.

    `profile_config` is amdsmi_get_gpu_accelerator_partition_profile_config();
    `memory_caps` is amdsmi_get_gpu_memory_partition_config()['partition_caps'].
    Returns ([], None) when the GPU reports no partition profiles.
    """
    if not profile_config:
        return [], None
    allowed_memory = {cap for cap in (memory_caps or []) if cap in MEMORY_MODES}
    modes: list[Mode] = []
    default: Mode | None = None
    default_index = profile_config.get("default_profile_index")
    for profile in profile_config.get("profiles") or []:
        compute = str(profile.get("profile_type", "")).upper()
        count = profile.get("num_partitions")
        if compute not in COMPUTE_MODES or not isinstance(count, int) or count < 1:
            continue
        caps = [cap for cap in profile.get("memory_caps") or [] if cap in MEMORY_MODES]
        if allowed_memory:
            caps = [cap for cap in caps if cap in allowed_memory]
        profile_modes = [Mode(compute, memory, count) for memory in caps]
        modes.extend(profile_modes)
        if profile.get("profile_index") == default_index and profile_modes:
            default = profile_modes[0]
    unique = sorted(set(modes), key=lambda m: (m.partitions, COMPUTE_MODES.index(m.compute), MEMORY_MODES.index(m.memory)))
    if default is None and unique:
        default = unique[0]
    return unique, default


def find_mode(modes: Sequence[Mode], compute: str | None, memory: str | None) -> Mode | None:
    for mode in modes:
        if mode.compute == compute and mode.memory == memory:
            return mode
    return None
