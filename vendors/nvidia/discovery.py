"""Read what NVML reports about each full GPU into plain GpuInfo records.

A GPU whose mandatory calls fail (GPU lost, driver error) is logged and
skipped; the other GPUs are still returned. Optional facts (NVLink, fabric,
PCIe root) are left empty when NVML or sysfs does not report them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from pathlib import Path

import pynvml

from dra_driver.backend.sysfs import numa_node as sysfs_numa_node
from dra_driver.backend.sysfs import pcie_root as sysfs_pcie_root
from dra_driver.backend.sysfs import pci_device_dir
from dra_driver.common.logs import fields
from dra_driver_nvidia import nvml
from dra_driver_nvidia.nvml import Handle, NvmlError

log = logging.getLogger(__name__)

# go-nvlib's strings for nvmlDeviceArchitecture_t (the upstream `architecture` attribute).
ARCHITECTURES = {
    2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing",
    7: "Ampere", 8: "Ada Lovelace", 9: "Hopper", 10: "Blackwell", 13: "Rubin",
}
BRANDS = {
    0: "Unknown", 1: "Quadro", 2: "Tesla", 3: "NVS", 4: "Grid", 5: "GeForce", 6: "Titan",
    7: "NvidiaVApps", 8: "NvidiaVPC", 9: "NvidiaVCS", 10: "NvidiaVWS", 11: "NvidiaCloudGaming",
    12: "QuadroRTX", 13: "NvidiaRTX", 14: "Nvidia", 15: "GeForceRTX", 16: "TitanRTX",
}
# NVML_NVLINK_VERSION_* -> NVLink generation as a version string.
NVLINK_VERSIONS = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}


@dataclass(frozen=True)
class SystemInfo:
    driver_version: str  # "580.159.04"
    cuda_driver_version: str | None  # "13.0"; None when NVML cannot tell (the attribute is then omitted)


@dataclass
class GpuInfo:
    handle: Handle
    index: int
    minor: int
    uuid: str
    product_name: str
    brand: str
    architecture: str
    compute_capability: str  # "9.0"
    memory_bytes: int
    pci_bus_id: str  # "0000:1b:00.0" (Kubernetes form)
    pcie_root: str | None
    numa_node: int | None  # from <device>/numa_node in sysfs; None when absent or -1
    mig_capable: bool
    mig_enabled: bool
    mig_pending: bool  # the mode after the next GPU reset; differs from mig_enabled while a change waits
    nvlink_links: int
    nvlink_version: str | None
    fabric_cluster: str | None  # the NVLink fabric's cluster UUID when the fabric is set up
    fabric_clique_id: int | None  # the clique within that cluster

    @property
    def fabric_clique(self) -> str | None:
        """"<clusterUuid>.<cliqueId>", the form GPU feature discovery's nvidia.com/gpu.clique label uses."""
        if self.fabric_cluster is None:
            return None
        return f"{self.fabric_cluster}.{self.fabric_clique_id}"

    @property
    def name(self) -> str:
        # Upstream names GPUs by minor number on purpose (stable across index reordering).
        return f"gpu-{self.minor}"


def system_info() -> SystemInfo:
    try:
        cuda = nvml.cuda_driver_version()
    except NvmlError as exc:
        # It only feeds one attribute: publish the GPUs without it rather than nothing at all.
        log.warning("CUDA driver version unavailable; cudaDriverVersion omitted", extra=fields(call=exc.call, error=exc.detail))
        return SystemInfo(nvml.driver_version(), None)
    return SystemInfo(nvml.driver_version(), f"{cuda // 1000}.{(cuda % 1000) // 10}")


def kubernetes_bus_id(nvml_bus_id: str) -> str:
    """NVML "00000000:1B:00.0" -> Kubernetes/sysfs "0000:1b:00.0"."""
    domain, rest = nvml_bus_id.strip().split(":", 1)
    return f"{int(domain, 16):04x}:{rest.lower()}"


T = TypeVar("T")
D = TypeVar("D")


def _optional(what: str, gpu: str, default: D, fn: Callable[..., T], *args: Any) -> T | D:
    try:
        return fn(*args)
    except NvmlError as exc:
        if exc.gpu_lost:
            raise
        log.debug("optional NVML fact unavailable", extra=fields(gpu=gpu, fact=what, error=str(exc)))
        return default


def _nvlink(handle: Handle, gpu: str) -> tuple[int, str | None]:
    links, version = 0, None
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            if not nvml.nvlink_state(handle, link):
                continue
        except NvmlError as exc:
            if exc.not_supported:
                break  # past the last link, or no NVLink on this board
            raise
        links += 1
        if version is None:
            version = NVLINK_VERSIONS.get(_optional("nvlink version", gpu, 0, nvml.nvlink_version, handle, link))
    return links, version


def _fabric(handle: Handle, gpu: str) -> tuple[str | None, int | None]:
    """(cluster UUID, clique ID) once fabric registration has completed; (None, None) otherwise."""
    info = _optional("fabric", gpu, None, nvml.fabric_info, handle)
    if info is None or info.state != pynvml.NVML_GPU_FABRIC_STATE_COMPLETED or info.status != pynvml.NVML_SUCCESS:
        return None, None
    return info.cluster_uuid, info.clique_id


def _mig_mode(handle: Handle, gpu: str) -> tuple[bool, bool, bool]:
    """(MIG capable, enabled now, enabled after the next reset)."""
    try:
        current, pending = nvml.mig_mode(handle)
    except NvmlError as exc:
        if exc.not_supported:
            return False, False, False
        raise
    return True, current == pynvml.NVML_DEVICE_MIG_ENABLE, pending == pynvml.NVML_DEVICE_MIG_ENABLE


def read_gpu(index: int, sysfs_root: Path) -> GpuInfo:
    """Everything about one GPU; raises NvmlError when a mandatory call fails."""
    handle = nvml.handle_by_index(index)
    label = f"index {index}"
    bus_id = kubernetes_bus_id(nvml.pci_bus_id(handle))
    major, minor_cc = nvml.compute_capability(handle)
    mig_capable, mig_enabled, mig_pending = _mig_mode(handle, label)
    links, link_version = _nvlink(handle, label)
    cluster, clique_id = _fabric(handle, label)
    return GpuInfo(
        handle=handle,
        index=index,
        minor=nvml.minor_number(handle),
        uuid=nvml.uuid(handle),
        product_name=nvml.name(handle),
        brand=BRANDS.get(nvml.brand(handle), "Unknown"),
        architecture=ARCHITECTURES.get(nvml.architecture(handle), "Unknown"),
        compute_capability=f"{major}.{minor_cc}",
        memory_bytes=nvml.memory_total(handle),
        pci_bus_id=bus_id,
        pcie_root=sysfs_pcie_root(pci_device_dir(sysfs_root, bus_id)),
        numa_node=sysfs_numa_node(pci_device_dir(sysfs_root, bus_id)),
        mig_capable=mig_capable,
        mig_enabled=mig_enabled,
        mig_pending=mig_pending,
        nvlink_links=links,
        nvlink_version=link_version,
        fabric_cluster=cluster,
        fabric_clique_id=clique_id,
    )


def read_gpus(sysfs_root: Path) -> list[GpuInfo]:
    """All readable GPUs; a GPU whose calls fail is logged with the failing call and skipped."""
    gpus: list[GpuInfo] = []
    for index in range(nvml.device_count()):
        try:
            gpus.append(read_gpu(index, sysfs_root))
        except NvmlError as exc:
            log.warning(
                "skipping GPU: NVML call failed",
                extra=fields(index=index, call=exc.call, error=exc.detail, gpu_lost=exc.gpu_lost),
            )
    return gpus
