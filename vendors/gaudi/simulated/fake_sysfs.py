"""Build a habanalabs sysfs tree in a directory from a profile's `gaudi:` section.

Only the tree is fake: discovery, attributes, health and prepare run the
production readers on it. The layout follows the habanalabs sysfs ABI document and Intel's faker (what the
kernel exposes, including the files Intel's faker omits: vendor, status,
device_type, infiniband_verbs). Profile schema: docs/attributes.md, Intel Gaudi.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dra_driver.backend import sysfs as sysfs_util
from dra_driver.backend.support import parse_profile_section

from dra_driver_gaudi import sysfs
from dra_driver_gaudi.models import normalize_device_id

HABANA_VENDOR_ID = "0x1da3"
# sysfs `device_type` strings of the kernel (habanalabs sysfs.c); IDs without one get none.
DEVICE_TYPES = {"0x1000": "GAUDI", "0x1010": "GAUDI SEC", "0x1020": "GAUDI2", "0x1060": "GAUDI3", "0x1063": "GAUDI3 HL-338"}
ACCEL_MAJOR = 261  # the DRM accel char-device major


class FakeDevice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bdf: str = Field(description="PCI address, lower-case, e.g. 0000:19:00.0")
    device_id: str = Field(description="PCI device id, e.g. 0x1020")
    accel_index: int = Field(ge=0)
    module_id: int = Field(ge=0)
    pci_root: str = Field(description="root complex, e.g. pci0000:17")
    bridge: str | None = Field(default=None, description="upstream switch port BDF between root and device")
    uverbs: int | None = Field(default=None, ge=0, description="RoCE verbs index; null when the NIC is absent")
    serial: str | None = Field(default=None, description="served by the simulated HLML when set")
    status: str = "Operational"
    numa_node: int | None = Field(default=None, ge=0, description="written as <function>/numa_node when set")

    @field_validator("bdf", "bridge")
    @classmethod
    def _bdf(cls, value: str | None) -> str | None:
        if value is not None and not sysfs_util.BDF_PATTERN.match(value):
            raise ValueError(f"{value!r} is not a lower-case PCI address like 0000:19:00.0")
        return value

    @field_validator("pci_root")
    @classmethod
    def _root(cls, value: str) -> str:
        if not sysfs_util.PCIE_ROOT_PATTERN.match(value):
            raise ValueError(f"{value!r} is not a root complex name like pci0000:17")
        return value

    @field_validator("device_id")
    @classmethod
    def _device_id(cls, value: str) -> str:
        # Kept as written (an unknown or oddly cased ID is a valid test input), only checked to be hex.
        normalize_device_id(value)
        return value


class FakeGaudiSection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    layout: Literal["modern", "legacy"] = Field(default="modern", description="legacy: accel devices under devices/virtual/accel")
    trailing_newline: bool = Field(default=True, description="real sysfs: true; Intel's faker: false")
    driver_version: str = "1.21.0-6a8a2e6"
    devices: list[FakeDevice] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> FakeGaudiSection:
        for field in ("bdf", "accel_index", "module_id"):
            values = [getattr(device, field) for device in self.devices]
            duplicates = sorted({value for value in values if values.count(value) > 1})
            if duplicates:
                raise ValueError(f"devices repeat {field} {duplicates}; each device needs its own")
        return self


def parse_section(section: Mapping[str, Any]) -> FakeGaudiSection:
    return parse_profile_section(FakeGaudiSection, section, "gaudi", "gaudi profile section")


class FakeSysfs:
    """A built tree; the setters simulate what the kernel changes at run time."""

    def __init__(self, root: Path, section: FakeGaudiSection) -> None:
        self.root = root
        self.section = section

    def _write(self, path: Path, value: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + ("\n" if self.section.trailing_newline else ""))

    def _link(self, link: Path, target: Path) -> None:
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(target, link.parent))

    def function_dir(self, device: FakeDevice) -> Path:
        parents = [device.pci_root, *([device.bridge] if device.bridge else [])]
        return self.root.joinpath("devices", *parents, device.bdf)

    def _device(self, bdf: str) -> FakeDevice:
        for device in self.section.devices:
            if device.bdf == bdf:
                return device
        raise KeyError(bdf)

    def set_status(self, bdf: str, status: str) -> None:
        self._write(self.function_dir(self._device(bdf)) / "status", status)

    def count_hard_reset(self, bdf: str) -> None:
        path = self.function_dir(self._device(bdf)) / "hard_reset_cnt"
        count = int(sysfs_util.read_text(path) or "0")
        self._write(path, str(count + 1))

    def build(self) -> None:
        driver_dir = self.root / sysfs.DRIVER_DIR
        driver_dir.mkdir(parents=True, exist_ok=True)
        (driver_dir / "bind").write_text("")
        for device in self.section.devices:
            self._build_device(device, driver_dir)

    def _build_device(self, device: FakeDevice, driver_dir: Path) -> None:
        function = self.function_dir(device)
        files = {
            "vendor": HABANA_VENDOR_ID,
            "device": device.device_id,
            "pci_addr": device.bdf,
            "status": device.status,
            "driver_ver": self.section.driver_version,
            "hard_reset_cnt": "0",
            "soft_reset_cnt": "0",
        }
        device_type = DEVICE_TYPES.get(device.device_id.lower())
        if device_type:
            files["device_type"] = device_type
        if device.numa_node is not None:
            files["numa_node"] = str(device.numa_node)
        for name, value in files.items():
            self._write(function / name, value)
        self._link(function / "driver", driver_dir)
        self._link(driver_dir / device.bdf, function)
        self._link(self.root / "bus/pci/devices" / device.bdf, function)
        if device.uverbs is not None:
            (function / "infiniband_verbs" / f"uverbs{device.uverbs}").mkdir(parents=True)
        accel = f"accel{device.accel_index}"
        if self.section.layout == "modern":
            self._write(function / "module_id", str(device.module_id))
            self._write(function / "accel" / accel / "dev", f"{ACCEL_MAJOR}:{device.accel_index}")
            self._link(self.root / "class/accel" / accel, function / "accel" / accel)
        else:
            # Older kernels: module_id and pci_addr only under the virtual accel device.
            virtual = self.root / sysfs.VIRTUAL_ACCEL_DIR / accel
            self._write(virtual / "device" / "module_id", str(device.module_id))
            self._write(virtual / "device" / "pci_addr", device.bdf)
            self._write(virtual / "dev", f"{ACCEL_MAJOR}:{device.accel_index}")
            self._link(self.root / "class/accel" / accel, virtual)


def build_fake_sysfs(section: Mapping[str, Any], root: Path) -> FakeSysfs:
    """Parse a profile section and build its tree under `root` (the sysfs root)."""
    tree = FakeSysfs(root, parse_section(section))
    tree.build()
    return tree
