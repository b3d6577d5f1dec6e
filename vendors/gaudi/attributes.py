"""What one Gaudi device publishes: Intel-compatible attributes, ours, and the common vocabulary.

Names in the driver's own domain (gaudi.intel.com) are bare identifiers.
`model`, `serial`, `healthy`, `pciRoot` and resource.kubernetes.io/pcieRoot
match Intel's driver so its selectors keep working (docs/attributes.md).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from dra_driver.model.device import AttributeValue, Device, Version
from dra_driver.model.quantity import from_bytes
from dra_driver.common.logs import fields
from dra_driver.backend.vocabulary import MAX_VALUE_BYTES, NUMA_NODE, PCI_BUS_ID, PCIE_ROOT, common_attributes, interconnect_domain

from dra_driver_gaudi.discovery import GaudiDevice
from dra_driver_gaudi.models import ModelInfo

log = logging.getLogger(__name__)
_SEMVER_CORE = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)")


@dataclass(frozen=True)
class DeviceFacts:
    """Everything known about one device when its attributes are built."""

    device: GaudiDevice
    model: ModelInfo
    serial: str = ""
    healthy: bool = True
    memory_bytes: int | None = None  # HLML's figure when present, else the model's
    driver_version: str | None = None  # sysfs driver_ver, e.g. "1.21.0-6a8a2e6"


def driver_version(raw: str | None) -> Version | None:
    """The MAJOR.MINOR.PATCH head of a habanalabs version string, when it has one."""
    match = _SEMVER_CORE.match(raw or "")
    return Version(match.group(0)) if match else None


def _serial(facts: DeviceFacts) -> str:
    """The HLML serial, or "" when it cannot be an attribute value (so the pool still publishes)."""
    if len(facts.serial.encode()) <= MAX_VALUE_BYTES:
        return facts.serial
    log.warning(
        "HLML serial longer than an attribute value allows; publishing an empty serial",
        extra=fields(bdf=facts.device.bdf, bytes=len(facts.serial.encode()), limit=MAX_VALUE_BYTES),
    )
    return ""


def _identity(facts: DeviceFacts) -> dict[str, AttributeValue]:
    device = facts.device
    attributes: dict[str, AttributeValue] = {
        "model": facts.model.name,
        "serial": _serial(facts),
        "healthy": facts.healthy,
        "pciDeviceId": device.device_id,
        "accelIndex": device.accel_index,
        "moduleId": device.module_id,
        "nic": device.uverbs_index is not None,
        PCI_BUS_ID: device.bdf,
    }
    if device.uverbs_index is not None:
        attributes["uverbsIndex"] = device.uverbs_index
    if device.numa_node is not None:
        attributes[NUMA_NODE] = device.numa_node
    if device.pcie_root:
        attributes[PCIE_ROOT] = device.pcie_root
        attributes["pciRoot"] = device.pcie_root.split(":")[-1]  # Intel's deprecated form: "17" for pci0000:17
    version = driver_version(facts.driver_version)
    if version is not None:
        attributes["driverVersion"] = version
    return attributes


def _fabric(facts: DeviceFacts, node_name: str) -> dict[str, AttributeValue]:
    model = facts.model
    # The board's wiring, whether or not the verbs device is exposed (`nic` says that):
    # older stacks drive the in-box links without an InfiniBand verbs device.
    scale_up = model.scale_up_ports
    attributes = common_attributes(
        vendor="intel",
        family=model.family,
        partition=False,
        interconnect="roce" if scale_up else "none",
        domain=interconnect_domain("roce", node_name) if scale_up else None,
        links=scale_up or 0,
    )
    if model.scale_out_ports is not None:
        attributes["scaleOutPorts"] = model.scale_out_ports
    return attributes


def build_device(facts: DeviceFacts, node_name: str) -> Device:
    capacity: dict[str, str] = {}
    memory = facts.memory_bytes or facts.model.memory_bytes
    if memory:
        capacity["memory"] = from_bytes(memory)
    return Device(
        name=facts.device.name,
        attributes={**_identity(facts), **_fabric(facts, node_name)},
        capacity=capacity,
    )
