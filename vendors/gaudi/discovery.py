"""Find the Gaudi PCI functions bound to habanalabs and what sysfs says about each.

Follows the order of Intel's driver (intel-resource-drivers-for-kubernetes pkg/gaudi/discovery): the driver
directory lists the BDFs; per BDF, `device` gives the PCI ID, `accel/accel<N>`
the accel index, `module_id` the OAM slot, `infiniband_verbs/uverbs<M>` the NIC.
Kernels without `<BDF>/accel` keep both numbers under
devices/virtual/accel/accel<N>/device/{pci_addr,module_id}.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from dra_driver.backend import sysfs as sysfs_util
from dra_driver.common.errors import DeviceError
from dra_driver.common.logs import fields

from dra_driver_gaudi import sysfs
from dra_driver_gaudi.models import normalize_device_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GaudiDevice:
    """One Gaudi PCI function as sysfs describes it."""

    bdf: str  # 0000:19:00.0
    device_id: str  # normalized, 0x1020
    accel_index: int
    module_id: int
    pcie_root: str | None  # pci0000:17
    numa_node: int | None  # <function>/numa_node; None when absent or -1
    uverbs_index: int | None  # None: no RoCE verbs device
    sysfs_dir: Path  # the PCI function's directory (through the driver's symlink)

    @property
    def name(self) -> str:
        """The device name Intel's driver uses: BDF with ':' and '.' as '-', then the PCI ID."""
        return f"{self.bdf.replace(':', '-').replace('.', '-')}-{self.device_id}"


@dataclass(frozen=True)
class _LegacyEntry:
    accel_index: int
    module_id: int | None


def _legacy_index(sysfs_root: Path) -> dict[str, _LegacyEntry]:
    """pci_addr -> accel index and module id from the older-kernel virtual accel devices."""
    base = sysfs_root / sysfs.VIRTUAL_ACCEL_DIR
    found: dict[str, _LegacyEntry] = {}
    for index in sysfs.numbered_entries(base, sysfs.ACCEL_PATTERN):
        device = base / f"accel{index}" / "device"
        address = sysfs_util.read_text(device / "pci_addr")
        if address:
            found[address.lower()] = _LegacyEntry(index, sysfs_util.read_int(device / "module_id"))
    return found


def _accel_index(bdf: str, function_dir: Path, legacy: dict[str, _LegacyEntry]) -> int:
    indices = sysfs.numbered_entries(function_dir / "accel", sysfs.ACCEL_PATTERN)
    if len(indices) == 1:
        return indices[0]
    if len(indices) > 1:
        raise DeviceError(bdf, f"{function_dir / 'accel'} lists several accel devices {indices}; expected exactly one")
    if bdf in legacy:
        return legacy[bdf].accel_index
    raise DeviceError(bdf, f"no accel device: neither {function_dir / 'accel'}/accel<N> nor a {sysfs.VIRTUAL_ACCEL_DIR}/accel<N> with pci_addr {bdf}")


def _module_id(bdf: str, function_dir: Path, legacy: dict[str, _LegacyEntry]) -> int:
    module = sysfs_util.read_int(function_dir / "module_id")
    if module is None and bdf in legacy:
        module = legacy[bdf].module_id
    if module is None:
        raise DeviceError(bdf, f"cannot read a module id from {function_dir / 'module_id'}")
    return module


def _uverbs_index(bdf: str, function_dir: Path) -> int | None:
    indices = sysfs.numbered_entries(function_dir / "infiniband_verbs", sysfs.UVERBS_PATTERN)
    if len(indices) > 1:
        log.warning("several verbs devices; using the first", extra=fields(device=bdf, uverbs=indices))
    return indices[0] if indices else None


def read_function(sysfs_root: Path, bdf: str, legacy: dict[str, _LegacyEntry]) -> GaudiDevice:
    """One bound function; DeviceError names what is missing."""
    function_dir = sysfs_root / sysfs.DRIVER_DIR / bdf
    raw_id = sysfs_util.read_text(function_dir / "device")
    if not raw_id:
        raise DeviceError(bdf, f"cannot read the PCI device id from {function_dir / 'device'}")
    try:
        device_id = normalize_device_id(raw_id)
    except ValueError as exc:
        raise DeviceError(bdf, f"{function_dir / 'device'} holds {raw_id!r}, not a hex PCI device id") from exc
    root = sysfs_util.pcie_root(function_dir)
    if root is None:
        log.info("no PCIe root in the device path; pcieRoot is not published", extra=fields(device=bdf))
    return GaudiDevice(
        bdf=bdf,
        device_id=device_id,
        accel_index=_accel_index(bdf, function_dir, legacy),
        module_id=_module_id(bdf, function_dir, legacy),
        pcie_root=root,
        numa_node=sysfs_util.numa_node(function_dir),
        uverbs_index=_uverbs_index(bdf, function_dir),
        sysfs_dir=function_dir,
    )


def discover_devices(sysfs_root: Path) -> list[GaudiDevice]:
    """Every readable Gaudi function, by accel index; an unreadable one is logged and skipped."""
    legacy = _legacy_index(sysfs_root)
    devices: list[GaudiDevice] = []
    for bdf in sysfs.bound_functions(sysfs_root):
        try:
            devices.append(read_function(sysfs_root, bdf, legacy))
        except DeviceError as exc:
            log.warning("skipping Gaudi device", extra=fields(device=exc.device, reason=exc.reason))
    return sorted(devices, key=lambda device: device.accel_index)
