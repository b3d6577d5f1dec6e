"""Switching a GPU's partition mode through amdsmi, and finding a partition afterwards.

Compute-mode changes take effect at once. A memory-mode (NPS) change on real
hardware only takes effect after the amdgpu driver is reloaded on an idle GPU,
and the reload applies to every GPU of the XGMI hive (AMD SMI partition docs). This
driver does not reload the kernel module: when the memory mode has not changed
after the set call, prepare fails with an error that says so, and the kubelet
retries once an operator (or a module-reload operator) has reloaded amdgpu.
"""

from __future__ import annotations

import logging
from typing import Any

from dra_driver.common.errors import DeviceError
from dra_driver.common.logs import fields

from dra_driver_amd.discovery import PartitionInfo, read_partitions
from dra_driver_amd.modes import Mode
from dra_driver_amd.smi import Smi, SmiError

log = logging.getLogger(__name__)


class Partitioner:
    def __init__(self, smi: Smi) -> None:
        self.smi = smi

    def _partitions(self, gpu_bdf: str) -> list[PartitionInfo]:
        # Handles change with the mode: enumerate again every time.
        partitions = read_partitions(self.smi, only=gpu_bdf).get(gpu_bdf)
        if not partitions:
            raise DeviceError(gpu_bdf, "GPU not found by amdsmi")
        return partitions

    def _handle(self, gpu_bdf: str) -> Any:
        return self._partitions(gpu_bdf)[0].handle

    def current(self, gpu_bdf: str) -> tuple[str | None, str | None]:
        handle = self._handle(gpu_bdf)
        return self.smi.compute_partition(handle), self.smi.memory_partition(handle)

    def apply(self, gpu_bdf: str, mode: Mode) -> bool:
        """Put the GPU in `mode`; True if anything was changed."""
        compute, memory = self.current(gpu_bdf)
        if (compute, memory) == (mode.compute, mode.memory):
            return False
        # More memory partitions than compute partitions is invalid, so the
        # order matters: split compute first when growing, merge memory first when shrinking.
        steps = [("compute", mode.compute != compute), ("memory", mode.memory != memory)]
        current_count = len(self._partitions(gpu_bdf))
        if mode.partitions < current_count:
            steps.reverse()
        try:
            for kind, needed in steps:
                if not needed:
                    continue
                handle = self._handle(gpu_bdf)
                if kind == "compute":
                    self.smi.set_compute_partition(handle, mode.compute)
                else:
                    self.smi.set_memory_partition(handle, mode.memory)
                    # Stop here when it did not take effect: the compute step
                    # could otherwise pair the old memory mode with an invalid compute mode.
                    self._check_memory(gpu_bdf, mode)
        except SmiError as exc:
            raise DeviceError(gpu_bdf, f"cannot switch to {mode.profile}: {exc}") from exc
        log.info("AMD GPU partition mode changed", extra=fields(bdf=gpu_bdf, old=f"{compute}_{memory}".lower(), new=mode.profile))
        return True

    def _check_memory(self, gpu_bdf: str, mode: Mode) -> None:
        _, now_memory = self.current(gpu_bdf)
        if now_memory != mode.memory:
            raise DeviceError(
                gpu_bdf,
                f"memory partition is still {now_memory} after requesting {mode.memory}: a memory-mode change "
                "needs an idle GPU and an amdgpu driver reload (modprobe -r amdgpu && modprobe amdgpu), which "
                "applies to the whole XGMI hive; reload the driver and the kubelet's retry will finish preparing",
            )

    def partition(self, gpu_bdf: str, index: int) -> PartitionInfo:
        for partition in self._partitions(gpu_bdf):
            if partition.index == index:
                return partition
        raise DeviceError(gpu_bdf, f"partition {index} does not exist after the mode change")
