"""Device plugins of this driver's vendors on the node, from every place the kubelet shows them.

Four sources, each optional (a driver pod may not mount all of them), merged into one report:
- registrations: the plugin sockets in <kubelet dir>/device-plugins/ (`nvidia-gpu.sock`; `kubelet.sock` is
  the kubelet's own), named by vendor from the socket name;
- the kubelet's checkpoint there (`kubelet_internal_checkpoint`): registered device IDs per resource and
  the IDs assigned to pods;
- the Node's `status.allocatable` (`nvidia.com/gpu`, `nvidia.com/mig-*`, `amd.com/gpu`, `habana.ai/gaudi`):
  a count only, no IDs;
- the PodResources API: the IDs each resource offers and the pods holding them.
Everything read is untrusted: sizes are bounded, bad entries skipped and named in `problems`.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_driver.common import json_text, node_file
from dra_driver.node.checks.pod_resources import Holder, PodResourcesUnavailable, read_pod_resources

DEVICE_PLUGIN_DIR = "device-plugins"
CHECKPOINT_NAME = "kubelet_internal_checkpoint"
_KUBELET_SOCKET = "kubelet.sock"
_MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024

# Extended resources of each vendor's device plugin (and the GPU Operator's, which runs the same plugins).
_VENDOR_RESOURCES: dict[str, re.Pattern[str]] = {
    "nvidia": re.compile(r"^nvidia\.com/(gpu(\.shared)?|mig-[0-9a-z.+-]+)$"),
    "amd": re.compile(r"^amd\.com/(gpu|[sdqc]px_nps[0-9]+)$"),
    "gaudi": re.compile(r"^habana\.ai/gaudi[0-9a-z]*$"),
}
_SOCKET_HINTS: dict[str, tuple[str, ...]] = {"nvidia": ("nvidia",), "amd": ("amd",), "gaudi": ("habana", "gaudi")}


def vendor_of_resource(resource: str) -> str | None:
    return next((vendor for vendor, pattern in _VENDOR_RESOURCES.items() if pattern.match(resource)), None)


def vendor_of_socket(name: str) -> str | None:
    lowered = name.lower()
    return next((vendor for vendor, hints in _SOCKET_HINTS.items() if any(h in lowered for h in hints)), None)


@dataclass
class VendorPlugins:
    """What is known of one vendor's device plugins on the node."""

    vendor: str
    sources: set[str] = field(default_factory=set)  # "registration", "checkpoint", "node", "pod-resources"
    resources: set[str] = field(default_factory=set)
    advertised: set[str] = field(default_factory=set)  # device IDs the plugins offer
    holders: list[Holder] = field(default_factory=list)  # device IDs pods hold

    def describe(self) -> str:
        names = ", ".join(sorted(self.resources)) or "resource unknown"
        return f"{self.vendor} device plugin ({names}; seen in {', '.join(sorted(self.sources))})"


@dataclass
class DevicePluginReport:
    vendors: dict[str, VendorPlugins] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # sources that could not be read, and why

    def for_vendor(self, vendor: str) -> VendorPlugins | None:
        return self.vendors.get(vendor)

    def note(self, vendor: str, source: str) -> VendorPlugins:
        entry = self.vendors.setdefault(vendor, VendorPlugins(vendor))
        entry.sources.add(source)
        return entry

    def add_resource(self, resource: str, source: str, ids: Iterable[str] = ()) -> None:
        vendor = vendor_of_resource(resource)
        if vendor is None:
            return
        entry = self.note(vendor, source)
        entry.resources.add(resource)
        entry.advertised.update(ids)

    def add_holder(self, holder: Holder, source: str) -> None:
        vendor = vendor_of_resource(holder.resource)
        if vendor is not None:
            entry = self.note(vendor, source)
            entry.resources.add(holder.resource)
            entry.holders.append(holder)


def scan(kubelet_dir: Path, pod_resources_socket: Path | None, node: Mapping[str, Any] | None = None) -> DevicePluginReport:
    """Every source that is there; a missing or unreadable one is named in `problems`, never fatal."""
    report = DevicePluginReport()
    plugin_dir = kubelet_dir / DEVICE_PLUGIN_DIR
    scan_registrations(plugin_dir, report)
    scan_checkpoint(plugin_dir / CHECKPOINT_NAME, report)
    if node is not None:
        scan_node(node, report)
    if pod_resources_socket is not None:
        scan_pod_resources(pod_resources_socket, report)
    return report


def scan_registrations(plugin_dir: Path, report: DevicePluginReport) -> None:
    try:
        entries = sorted(plugin_dir.iterdir())
    except FileNotFoundError:
        return
    except OSError as exc:
        report.problems.append(f"{plugin_dir}: {exc.strerror or exc}")
        return
    for entry in entries:
        if entry.name == _KUBELET_SOCKET:
            continue
        try:
            is_socket = stat.S_ISSOCK(entry.lstat().st_mode)
        except OSError:
            continue
        vendor = vendor_of_socket(entry.name) if is_socket else None
        if vendor is not None:
            report.note(vendor, "registration")


def scan_checkpoint(path: Path, report: DevicePluginReport) -> None:
    """The kubelet's device-manager checkpoint: `Data.RegisteredDevices` and `Data.PodDeviceEntries`
    (`DeviceIDs` is a map NUMA node -> IDs since Kubernetes 1.20, a plain list before)."""
    try:
        raw = node_file.read_regular(path, _MAX_CHECKPOINT_BYTES)
    except FileNotFoundError:
        return
    except node_file.NodeFileError as exc:
        report.problems.append(str(exc))
        return
    except OSError as exc:
        report.problems.append(f"{path}: {exc.strerror or exc}")
        return
    try:
        data = json_text.loads(raw).get("Data") or {}
        registered = data.get("RegisteredDevices") or {}
        entries = data.get("PodDeviceEntries") or []
        if not isinstance(registered, dict) or not isinstance(entries, list):
            raise ValueError("Data.RegisteredDevices must be a map and Data.PodDeviceEntries a list")
    except (ValueError, AttributeError) as exc:
        report.problems.append(f"{path}: not a kubelet device-plugin checkpoint ({type(exc).__name__}: {exc})")
        return
    for resource, ids in registered.items():
        report.add_resource(str(resource), "checkpoint", _strings(ids))
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        resource = str(entry.get("ResourceName") or "")
        for device_id in _checkpoint_ids(entry.get("DeviceIDs")):
            # The checkpoint names the pod by UID only.
            report.add_holder(Holder(resource, device_id, "", f"uid {entry.get('PodUID', '?')}", str(entry.get("ContainerName") or "")), "checkpoint")


def _checkpoint_ids(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [i for ids in value.values() for i in _strings(ids)]
    return _strings(value)


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str) and 0 < len(v) <= 256] if isinstance(value, list) else []


def scan_node(node: Mapping[str, Any], report: DevicePluginReport) -> None:
    """A vendor resource with a non-zero allocatable count (the kubelet keeps a departed plugin's name at 0)."""
    allocatable = ((node.get("status") or {}).get("allocatable")) or {}
    if not isinstance(allocatable, Mapping):
        return
    for resource, value in allocatable.items():
        if str(value).strip() not in ("0", ""):
            report.add_resource(str(resource), "node")


def scan_pod_resources(socket: Path, report: DevicePluginReport) -> None:
    try:
        view = read_pod_resources(socket)
    except PodResourcesUnavailable as exc:
        report.problems.append(str(exc))
        return
    for resource, ids in view.allocatable.items():
        report.add_resource(resource, "pod-resources", ids)
    for holder in view.holders:
        report.add_holder(holder, "pod-resources")
