"""`dra-driver doctor`: can this node serve claims, and if not, why and how to fix it.

Every check returns one `CheckResult` (pass, warn or fail, what was found, the fix). A failure means
the node cannot serve claims as configured; a warning means it can, but something is likely to bite
(a device plugin beside the driver, no cluster access to check the API, CDI depending on the
runtime's version). The checks read the node as `run` would, with the same paths and flags.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from dra_driver.common.errors import DraError
from dra_driver.model.device import Inventory
from dra_driver.node.checks import runtime_config
from dra_driver.node.checks.coexistence import Offer, withheld_devices
from dra_driver.node.checks.device_plugins import DevicePluginReport, scan
from dra_driver.node.checks.permissions import world_writable
from dra_driver.node.checks.same_name import created_here, describe_foreign, plugin_info, same_name_registrations, written_by_other
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.registry import OpenedBackends, open_backends
from dra_driver.backend.interface import BackendSettings, Partitioning, Profile

log = logging.getLogger(__name__)
API_TIMEOUT_S = 5.0
# Device nodes each shipped vendor's containers need (a third-party vendor is not checked here).
VENDOR_DEVICE_NODES: dict[str, tuple[str, ...]] = {
    "nvidia": ("nvidiactl", "nvidia[0-9]*"),
    "amd": ("kfd", "dri/renderD*"),
    "gaudi": ("accel/accel[0-9]*",),
}


class Status(str, Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    UNSEEN = "cannot-see"  # what the check reads is outside this process's view (a host file the pod does not mount)


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    summary: str
    fix: str = ""
    details: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status.value, "summary": self.summary, "fix": self.fix, "details": list(self.details)}


@dataclass(frozen=True)
class DoctorSettings:
    """The paths and flags of `run` (same names, same defaults) and where the runtimes keep their configuration."""

    node_name: str
    kubelet_dir: Path
    cdi_dir: Path
    state_dir: Path
    driver_root: Path
    pod_resources_socket: Path
    dev_dir: Path = Path("/dev")
    containerd_config: Path = runtime_config.DEFAULT_CONTAINERD_CONFIG
    crio_config: Path = runtime_config.DEFAULT_CRIO_CONFIG
    vendors: list[str] | None = None
    profile: Profile | None = None
    offer: Offer = field(default_factory=Offer)
    api_server: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    simulated_root: Path | None = None  # run's --simulated-root (None also for `none`)
    partitioning: Partitioning = "static"
    in_pod: bool = False  # in a Kubernetes pod: the host's files are only those it mounts


@dataclass
class NodeFacts:
    """What several checks share: the opened backends' inventories (by vendor), the API client if any."""

    inventories: dict[str, Inventory] = field(default_factory=dict)
    drivers: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    api: Any = None  # JsonApi, or None without cluster access
    api_problem: str = ""
    node: dict[str, Any] | None = None


@dataclass(frozen=True)
class DoctorReport:
    checks: list[CheckResult]

    @property
    def can_serve(self) -> bool:
        return all(c.status is not Status.FAIL for c in self.checks)

    @property
    def exit_code(self) -> int:
        return 0 if self.can_serve else 1

    def as_json(self) -> dict[str, Any]:
        return {"canServeClaims": self.can_serve, "exitCode": self.exit_code, "checks": [c.as_json() for c in self.checks]}

    def count(self, status: Status) -> int:
        return sum(c.status is status for c in self.checks)


def run_checks(settings: DoctorSettings) -> DoctorReport:
    with node_facts(settings) as facts:
        checks: list[Callable[[DoctorSettings, NodeFacts], CheckResult]] = [
            check_vendor_libraries, check_device_nodes, check_kubelet_dirs, check_registration, check_cdi_dir,
            check_runtime_cdi, check_resource_api, check_extended_resource_skew, check_device_plugins, check_same_name_drivers,
            check_instance, check_permissions,
        ]  # fmt: skip
        return DoctorReport([_guarded(check, settings, facts) for check in checks])


def _guarded(check: Callable[[DoctorSettings, NodeFacts], CheckResult], settings: DoctorSettings, facts: NodeFacts) -> CheckResult:
    """A check that breaks is a failed check with its error, never the end of the report."""
    try:
        return check(settings, facts)
    except Exception as exc:
        name = check.__name__.removeprefix("check_").replace("_", "-")
        return CheckResult(name, Status.FAIL, f"the check itself failed: {type(exc).__name__}: {exc}", "run with -vv and report it")


@contextmanager
def node_facts(settings: DoctorSettings) -> Iterator[NodeFacts]:
    facts = NodeFacts()
    opened = open_backends(_backend_settings(settings), settings.profile, settings.vendors)
    try:
        facts.unavailable = [str(p) for p in opened.unavailable]
        for backend in opened.backends:
            facts.drivers.append(backend.driver_name)
            try:
                facts.inventories[backend.vendor] = backend.discover()
            except Exception as exc:  # reported by the vendor check
                facts.unavailable.append(f"{backend.vendor}: discovery failed: {exc}")
        _connect(settings, facts)
        yield facts
    finally:
        OpenedBackends(opened.backends).close()


def _backend_settings(settings: DoctorSettings) -> BackendSettings:
    # A scratch state dir: the doctor must not touch the state of a daemon that runs (backend records, MIG ownership).
    return BackendSettings(node_name=settings.node_name, partitioning=settings.partitioning, state_dir=None, driver_root=settings.driver_root)


def _connect(settings: DoctorSettings, facts: NodeFacts) -> None:
    try:
        from dra_driver.kube.client import JsonApi, load_configuration
        from dra_driver.kube.server_check import without_retries

        # No retries: the doctor reports an unreachable server now, it does not wait for it.
        configuration = without_retries(load_configuration(settings.api_server, settings.kubeconfig, settings.context))
        facts.api = JsonApi(configuration)
    except DraError as exc:
        facts.api_problem = str(exc)
        return
    except Exception as exc:  # a malformed kubeconfig
        facts.api_problem = f"cannot load the API client configuration: {exc}"
        return
    try:
        facts.node = facts.api.request("GET", f"/api/v1/nodes/{settings.node_name}", timeout=API_TIMEOUT_S)
    except Exception as exc:
        log.debug("node not readable", extra={"fields": {"error": str(exc)}})


# --------------------------------------------------------------------------- hardware


def check_vendor_libraries(settings: DoctorSettings, facts: NodeFacts) -> CheckResult:
    found = [f"{vendor}: {len(inv.devices)} devices ({inv.driver})" for vendor, inv in sorted(facts.inventories.items())]
    if not settings.driver_root.is_dir():
        return CheckResult(
            "vendor-libraries",
            Status.FAIL,
            f"--driver-root {settings.driver_root} is not a directory",
            "mount the host's driver root and pass it as --driver-root (/ or /run/nvidia/driver with the GPU Operator)",
            tuple(facts.unavailable),
        )
    if not facts.inventories:
        return CheckResult("vendor-libraries", Status.FAIL, "no vendor library (NVML, amdsmi, HLML) found a device",
                           "install the vendor's kernel driver and user-space library on the node, or mount them into the driver's pod "
                           f"(--driver-root {settings.driver_root})", tuple(facts.unavailable))  # fmt: skip
    status = Status.WARN if facts.unavailable and settings.vendors else Status.PASS
    return CheckResult(
        "vendor-libraries", status, "; ".join(found), "" if status is Status.PASS else "see the vendors that could not open", tuple(facts.unavailable)
    )


def check_device_nodes(settings: DoctorSettings, facts: NodeFacts) -> CheckResult:
    if settings.profile is not None:
        return _simulated_device_nodes(settings)
    missing = []
    for vendor in sorted(facts.inventories):
        for pattern in VENDOR_DEVICE_NODES.get(vendor, ()):
            if not glob.glob(str(settings.dev_dir / pattern)):
                missing.append(f"{vendor}: {settings.dev_dir / pattern}")
    if missing:
        return CheckResult("device-nodes", Status.FAIL, f"device nodes missing: {', '.join(missing)}",
                           "mount the host's /dev into the driver's pod and load the vendor's kernel module", tuple(missing))  # fmt: skip
    return CheckResult("device-nodes", Status.PASS, f"device nodes present under {settings.dev_dir}")


def _simulated_device_nodes(settings: DoctorSettings) -> CheckResult:
    """Simulated hardware: its device nodes are made under --simulated-root when a spec names them (simulation/node.py)."""
    name = f"simulated hardware (--profile {settings.profile.name if settings.profile else ''})"
    if settings.simulated_root is None:
        return CheckResult("device-nodes", Status.PASS, f"{name} without a simulated root: no device nodes (no container runtime may read its specs)")
    if not settings.simulated_root.is_dir():
        return CheckResult(
            "device-nodes",
            Status.FAIL,
            f"{name}: --simulated-root {settings.simulated_root} is not a directory",
            "mount the host path at the same path in the driver's pod (deploy/overlays/simulated: /var/run/dra-driver-sim)",
        )
    return CheckResult("device-nodes", Status.PASS, f"{name}: device nodes and driver files under --simulated-root {settings.simulated_root}")


# --------------------------------------------------------------------------- kubelet


def check_kubelet_dirs(settings: DoctorSettings, facts: NodeFacts) -> CheckResult:
    problems = [p for p in (_dir_problem(settings.kubelet_dir / name) for name in ("plugins_registry", "plugins")) if p]
    if problems:
        return CheckResult(
            "kubelet-dirs",
            Status.FAIL,
            "; ".join(problems),
            "mount the kubelet's plugins_registry and plugins directories (read-write) and pass their parent as --kubelet-dir "
            f"({settings.kubelet_dir})",
        )
    return CheckResult("kubelet-dirs", Status.PASS, f"{settings.kubelet_dir}/plugins_registry and plugins are writable directories")


def _dir_problem(path: Path) -> str:
    if not path.is_dir():
        return f"{path} is not a directory"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path} is not writable by this user"
    return ""


def check_registration(settings: DoctorSettings, facts: NodeFacts) -> CheckResult:
    """Each driver this node would run: is one of its registration sockets there and serving?"""
    serving: list[str] = []
    missing: list[str] = []
    for driver in facts.drivers:
        sockets = sorted((settings.kubelet_dir / "plugins_registry").glob(f"{driver}-*reg.sock"))
        answered = [s.name for s in sockets if getattr(plugin_info(s), "name", None) == driver]
        (serving if answered else missing).append(f"{driver}: {', '.join(answered) or 'no registration socket answers'}")
    if missing:
        return CheckResult(
            "registration",
            Status.WARN,
            "; ".join(missing),
            "start the driver (dra-driver run, or its DaemonSet) on this node; the kubelet registers it within seconds",
            tuple(serving),
        )
    return CheckResult("registration", Status.PASS, "; ".join(serving) or "no driver to register")


# --------------------------------------------------------------------------- CDI


def check_cdi_dir(settings: DoctorSettings, facts: NodeFacts) -> CheckResult:
    problem = _dir_problem(settings.cdi_dir)
    if problem:
        return CheckResult(
            "cdi-dir", Status.FAIL, problem, f"mount the host's {settings.cdi_dir} read-write into the driver's pod, or point --cdi-dir at one"
        )
    return CheckResult("cdi-dir", Status.PASS, f"{settings.cdi_dir} is a writable directory")


def check_runtime_cdi(settings: DoctorSettings, facts: NodeFacts) -> CheckResult:
    runtimes = [r for r in (runtime_config.containerd_cdi(settings.containerd_config), runtime_config.crio_cdi(settings.crio_config)) if r]
    if not runtimes and settings.in_pod:  # the DaemonSet mounts no runtime configuration: nothing is wrong, it is out of view
        return CheckResult(
            "runtime-cdi",
            Status.UNSEEN,
            f"cannot see the container runtime's configuration from this pod ({settings.containerd_config}, "
            f"{settings.crio_config} are host files it does not mount)",
            f"run `dra-driver doctor` on the node itself to check it, or mount the file read-only and pass --containerd-config/--crio-config; "
            f"containerd 1.7 needs enable_cdi = true, and {settings.cdi_dir} must be among its cdi_spec_dirs",
        )
    if not runtimes:
        return CheckResult(
            "runtime-cdi",
            Status.WARN,
            f"no containerd ({settings.containerd_config}) or CRI-O ({settings.crio_config}) configuration found",
            f"mount the runtime's configuration to check it; containerd 1.7 needs enable_cdi = true, and {settings.cdi_dir} must be among its "
            "cdi_spec_dirs",
        )
    results = [_runtime_verdict(r, settings.cdi_dir) for r in runtimes]
    worst = max(results, key=lambda r: list(Status).index(r[0]))
    return CheckResult("runtime-cdi", worst[0], "; ".join(text for _, text, _ in results), worst[2])


def _runtime_verdict(runtime: runtime_config.RuntimeCdi, cdi_dir: Path) -> tuple[Status, str, str]:
    where = f"{runtime.runtime} ({runtime.source})"
    if runtime.problem:
        return Status.FAIL, f"{where}: {runtime.problem}", "fix the file's syntax; the runtime fails to read it too"
    dirs = f"cdi_spec_dirs = {list(runtime.spec_dirs)}"
    if runtime.enabled is False:
        return Status.FAIL, f"{where}: CDI is disabled (enable_cdi = false)", "set enable_cdi = true in the CRI plugin section and restart containerd"
    if not runtime.reads(cdi_dir):
        return (
            Status.FAIL,
            f"{where}: {dirs} does not include {cdi_dir}",
            f'add "{cdi_dir}" to cdi_spec_dirs and restart {runtime.runtime}, or point --cdi-dir at one of them',
        )
    if runtime.enabled is None:
        return (
            Status.WARN,
            f"{where}: enable_cdi is not set; containerd 2.x enables CDI by default, 1.7 does not",
            "set enable_cdi = true in the CRI plugin section (needed on containerd 1.7) and restart containerd",
        )
    return Status.PASS, f"{where}: CDI on, {dirs}", ""


# --------------------------------------------------------------------------- cluster


def check_resource_api(settings: DoctorSettings, facts: NodeFacts) -> CheckResult:
    if facts.api is None:
        return CheckResult(
            "resource-api", Status.WARN, f"not checked: no cluster access ({facts.api_problem})", "pass --kubeconfig, or run in the driver's pod"
        )
    try:
        group = facts.api.request("GET", "/apis/resource.k8s.io/v1", timeout=API_TIMEOUT_S)
    except Exception as exc:
        status = getattr(exc, "status", None)
        if status == 404:
            return CheckResult("resource-api", Status.FAIL, "the API server does not serve resource.k8s.io/v1",
                               "Kubernetes 1.34 or later serves it (1.35 recommended); enable the resource.k8s.io/v1 API group")  # fmt: skip
        return CheckResult(
            "resource-api",
            Status.FAIL,
            f"cannot ask the API server: {_short(exc)}",
            "check the kubeconfig and that the API server is reachable from this node",
        )
    served = {r.get("name") for r in group.get("resources") or []}
    if "resourceslices" not in served:
        return CheckResult(
            "resource-api", Status.FAIL, "resource.k8s.io/v1 does not serve resourceslices", "upgrade the cluster to Kubernetes 1.34 or later"
        )
    return CheckResult("resource-api", Status.PASS, "resource.k8s.io/v1 is served (resourceslices, resourceclaims)")


def _minor(version: object) -> tuple[int, int] | None:
    """(1, 36) of "v1.36.2"; None when the text is not a Kubernetes version."""
    match = re.match(r"^v?(\d+)\.(\d+)", version) if isinstance(version, str) else None
    return (int(match.group(1)), int(match.group(2))) if match else None


def check_extended_resource_skew(settings: DoctorSettings, facts: NodeFacts) -> CheckResult:
    """A 1.36+ control plane maps extended resources (nvidia.com/gpu) to this driver's classes by default; a 1.35
    kubelet ignores the claim the scheduler makes for them unless its DRAExtendedResource gate is on, and the
    container starts without the device (measured on 1.36.2 + 1.35.6, docs/e2e.md)."""
    name = "extended-resource-skew"
    if facts.api is None or facts.node is None:
        return CheckResult(name, Status.PASS, "not checked: no cluster access or no Node object")
    kubelet = ((facts.node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion")
    try:
        server = facts.api.request("GET", "/version", timeout=API_TIMEOUT_S).get("gitVersion")
        classes = facts.api.request("GET", "/apis/resource.k8s.io/v1/deviceclasses", timeout=API_TIMEOUT_S).get("items") or []
    except Exception as exc:
        return CheckResult(name, Status.PASS, f"not checked: {_short(exc)}")
    kubelet_minor, server_minor = _minor(kubelet), _minor(server)
    if kubelet_minor is None or server_minor is None or not (kubelet_minor < (1, 36) <= server_minor):
        return CheckResult(name, Status.PASS, f"kubelet {kubelet or 'unknown'}, API server {server or 'unknown'}: no extended-resource skew")
    mapped = sorted(
        f"{(c.get('spec') or {}).get('extendedResourceName')} ({(c.get('metadata') or {}).get('name')})"
        for c in classes
        if isinstance(c, dict)
        and (c.get("spec") or {}).get("extendedResourceName")
        and any(driver in json.dumps((c.get("spec") or {}).get("selectors") or []) for driver in facts.drivers)
    )
    if not mapped:
        return CheckResult(name, Status.PASS, f"kubelet {kubelet}, API server {server}: no DeviceClass of this driver maps an extended resource")
    return CheckResult(
        name,
        Status.WARN,
        f"kubelet {kubelet} with API server {server}: a pod asking {', '.join(mapped)} is given a claim by the scheduler that "
        "this kubelet ignores unless its DRAExtendedResource gate is on (off by default in 1.35): the container would start without the device",
        "turn DRAExtendedResource on in this kubelet's featureGates, or upgrade the kubelet to 1.36, or keep those pods on claims or the device "
        "plugin",
    )


def _short(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    return f"HTTP {status} {getattr(exc, 'reason', '')}".strip() if status else f"{type(exc).__name__}: {exc}"[:300]


# --------------------------------------------------------------------------- coexistence


def check_device_plugins(settings: DoctorSettings, facts: NodeFacts) -> CheckResult:
    report = scan(settings.kubelet_dir, settings.pod_resources_socket, facts.node)
    found = [(vendor, plugins) for vendor, plugins in sorted(report.vendors.items()) if vendor in facts.inventories or not facts.inventories]
    details = tuple(report.problems)
    if not found and details:
        return CheckResult(
            "device-plugins",
            Status.WARN,
            "no device plugin of this driver's vendors seen, but not every source could be read",
            f"mount {settings.kubelet_dir}/device-plugins and {settings.kubelet_dir}/pod-resources (read-only) into the driver's pod",
            details,
        )
    if not found:
        return CheckResult("device-plugins", Status.PASS, "no device plugin of this driver's vendors on the node")
    lines = [_withheld_line(vendor, plugins, facts, settings.offer, report) for vendor, plugins in found]
    return CheckResult(
        "device-plugins",
        Status.WARN,
        "; ".join(lines),
        "remove the device plugin (or the GPU Operator's devicePlugin) from this node, e.g. with a node selector on its DaemonSet; "
        "or split the node on purpose with --offer-devices and configure the device plugin to leave those devices alone",
        details,
    )


def _withheld_line(vendor: str, plugins: Any, facts: NodeFacts, offer: Offer, report: DevicePluginReport) -> str:
    inventory = facts.inventories.get(vendor)
    if inventory is None:
        return plugins.describe()
    withheld = withheld_devices(inventory, report.for_vendor(vendor), offer)
    return f"{plugins.describe()}: {len(withheld)} of {len(inventory.devices)} devices withheld from this driver"


def check_same_name_drivers(settings: DoctorSettings, facts: NodeFacts) -> CheckResult:
    conflicts: list[str] = []
    stale: list[str] = []
    for driver in facts.drivers:
        state_root = PluginPaths(settings.kubelet_dir, driver, state_dir=settings.state_dir).state_root
        for found in same_name_registrations(settings.kubelet_dir, driver, state_root):
            (conflicts if found.answered else stale).append(f"{driver}: {found.socket}" + (f" serving {found.endpoint}" if found.endpoint else ""))
        conflicts.extend(f"{driver}: ResourceSlices {text}" for text in _foreign_slices(settings, facts, driver))
    if conflicts:
        return CheckResult(
            "same-name-drivers",
            Status.FAIL,
            f"another DRA driver with this driver's name runs here: {'; '.join(conflicts)}",
            "run only one driver per name on a node: remove the vendor's own DRA driver from this node, or this one",
            tuple(stale),
        )
    if stale:
        return CheckResult(
            "same-name-drivers",
            Status.WARN,
            f"registration sockets nobody serves: {'; '.join(stale)}",
            "remove the stale socket files (the kubelet ignores them)",
        )
    checked = "registrations" + (" and ResourceSlices" if facts.api is not None else "")
    return CheckResult("same-name-drivers", Status.PASS, f"no other driver with this driver's name ({checked} checked)")


def _foreign_slices(settings: DoctorSettings, facts: NodeFacts, driver: str) -> list[str]:
    if facts.api is None:
        return []
    try:
        body = facts.api.request(
            "GET",
            "/apis/resource.k8s.io/v1/resourceslices",
            {"fieldSelector": f"spec.nodeName={settings.node_name},spec.driver={driver}"},
            timeout=API_TIMEOUT_S,
        )
    except Exception:  # reported by the resource-api check
        return []
    foreign = [item for item in body.get("items") or [] if written_by_other(item)]
    return [describe_foreign(foreign)] if foreign else []


# --------------------------------------------------------------------------- this driver's own state


def check_instance(settings: DoctorSettings, facts: NodeFacts) -> CheckResult:
    """Which daemons hold the drivers' state (their instance locks and records) and how many registered."""
    from dra_driver.node.plugin.instance_lock import holders_under

    held = holders_under(settings.state_dir)
    registered = {driver: _our_registrations(settings, driver) for driver in facts.drivers}
    several = [f"{driver}: {count} instances registered" for driver, count in registered.items() if count > 1]
    several += [f"{driver}: {len(holders)} instances hold its state" for driver, holders in held.items() if len(holders) > 1]
    running = "; ".join(f"{driver} held by {', '.join(h.describe() for h in holders)}" for driver, holders in held.items())
    summary = f"a driver daemon runs on {settings.state_dir}: {running}" if held else f"no driver daemon runs on {settings.state_dir}"
    if several:
        return CheckResult(
            "instance",
            Status.WARN,
            f"{summary}; {'; '.join(sorted(set(several)))}",
            "normal for the seconds of a rolling update (each pod with its own --pod-uid); otherwise stop the extra daemon",
        )
    return CheckResult("instance", Status.PASS, summary)


def _our_registrations(settings: DoctorSettings, driver: str) -> int:
    """Registration sockets this driver's instances created that are still there (a killed one's record alone does not count)."""
    state_root = PluginPaths(settings.kubelet_dir, driver, state_dir=settings.state_dir).state_root
    sockets = (settings.kubelet_dir / "plugins_registry").glob(f"{driver}-*reg.sock")
    return sum(1 for socket in sockets if created_here(state_root, socket, driver))


def check_permissions(settings: DoctorSettings, facts: NodeFacts) -> CheckResult:
    roots = [settings.cdi_dir, settings.state_dir, settings.kubelet_dir / "plugins_registry"]
    roots += [settings.kubelet_dir / "plugins" / driver for driver in facts.drivers]
    found = world_writable(roots)
    if found:
        listed = tuple(f"{path} (mode {mode:04o})" for path, mode in found)
        return CheckResult(
            "permissions",
            Status.FAIL,
            f"{len(found)} world-writable path(s): any local user could plant CDI specs or call the driver's sockets",
            "chmod o-w each listed path (the driver creates them 0700/0755/0600), then find what loosened them (a umask, a hostPath type)",
            listed,
        )
    return CheckResult("permissions", Status.PASS, "no world-writable socket, CDI spec or state file")
