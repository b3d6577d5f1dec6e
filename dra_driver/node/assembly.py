"""How `dra-driver run` builds the daemon from its settings: the checks before anything starts (node identity,
the kubelet's and the runtime's directories, the API server), the backends, the simulated root a profile
needs, and the kubernetes client with what uses it, built in `connect_api` once every driver serves.

Start-up is on the kubelet's clock (a prepare it sends before the registration socket answers fails, and the
pod is backed off for ~40 s), so this module imports only what serving the sockets needs; the kubernetes
client, the slice publisher and the claim cache are loaded in `connect_api` (dra_driver.node.daemon).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dra_driver.backend.interface import BackendSettings
from dra_driver.backend.registry import open_backends
from dra_driver.common.errors import DraError, UsageError
from dra_driver.common.logs import fields
from dra_driver.kube.api_source import ApiSource, api_source
from dra_driver.model.names import dns_subdomain_problem, uid_problem
from dra_driver.common import file_modes
from dra_driver.node.checks.coexistence import CoexistenceSettings, DevicePluginGuard, Offer
from dra_driver.node.checks.pod_resources import default_socket as default_pod_resources_socket
from dra_driver.node.checks.same_name import ConflictBoard
from dra_driver.node.daemon import ApiWiring, Daemon
from dra_driver.node.plugin.driver import PluginSettings
from dra_driver.node.settings import NO_SIMULATED_ROOT, DaemonSettings

if TYPE_CHECKING:  # the client is loaded once the sockets serve; a real node never imports the simulation's modules
    from dra_driver.kube.client import JsonApi
    from dra_driver.simulation.node import SimulatedRoot

log = logging.getLogger(__name__)


def _log_warning(message: str) -> None:
    log.warning(message)




# The flags the daemon records with its instance lock (instance_lock.py), which `doctor` adopts: what decides
# which node, which hardware and which directories the daemon serves.
RECORDED_FLAGS = (
    "node_name", "kubelet_dir", "cdi_dir", "state_dir", "driver_root", "profile", "partitioning", "simulated_root", "vendors",
    "offer_devices", "pod_resources_socket", "api_server", "kubeconfig", "context", "pod_uid",
)  # fmt: skip


def recorded_flags(config: DaemonSettings) -> dict[str, str]:
    """The effective values of RECORDED_FLAGS (after environment defaults), as `--flag` -> text; paths made absolute."""
    flags = {}
    for dest in RECORDED_FLAGS:
        value = getattr(config, dest, None)
        if value is not None:
            flags["--" + dest.replace("_", "-")] = os.path.abspath(value) if isinstance(value, Path) else str(value)
    return flags


def writable_dir(flag: str, path: Path, mode: int) -> None:
    """Create `path` if needed (with `mode`, whatever the umask) and prove it writable, or raise DraError naming
    the flag and the fix.

    Checked before anything starts: otherwise every driver would fail its start (state dir) or every
    claim its prepare (CDI dir) with a bare OSError.
    """
    try:
        file_modes.make_dirs(path, mode)
        probe = path / f".dra-driver-write-check-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except FileExistsError as exc:
        raise UsageError(f"{flag} {path}: exists and is not a directory; point {flag} at a writable directory") from exc
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot create or write it ({exc.strerror or exc}); point {flag} at a writable directory") from exc


def check_identity(node_name: str, pod_uid: str | None) -> None:
    """The node name becomes the pool name claims must match, the pod UID part of socket file names: both are
    checked against the Kubernetes rules before use."""
    problem = dns_subdomain_problem(node_name)
    if problem is not None:
        raise UsageError(f"--node-name {problem}; pass the Kubernetes node name (spec.nodeName, through the downward API as $NODE_NAME)")
    problem = uid_problem(pod_uid) if pod_uid is not None else None
    if problem is not None:
        raise UsageError(f"--pod-uid {problem}; pass the driver pod's metadata.uid (through the downward API as $POD_UID)")


def _absolute(flag: str, value: str | Path | None) -> Path | None:
    """A host path for CDI specs: runtimes reject relative ones, so refuse them here, naming the flag."""
    if value is None:
        return None
    path = Path(value)
    if not path.is_absolute() or ".." in path.parts:
        raise UsageError(f"{flag} {value}: must be an absolute host path without '..' (CDI specs need absolute paths)")
    return path


def build_daemon(config: DaemonSettings, simulated: SimulatedRoot | None = None, warn: Callable[[str], None] = _log_warning) -> Daemon:
    """Open the backends described by the arguments; raise DraError if nothing can run.

    With `simulated` (--simulated-root), simulated backends name device nodes and driver files on that host path.

    The API client is only located here (a missing kubeconfig fails now); the daemon builds it with
    `connect_api` after the sockets serve. `warn` tells the user what does not stop the start (the CLI prints it
    whatever the log level).
    """
    check_identity(config.node_name, config.pod_uid)
    source = api_source(config.api_server, config.kubeconfig, config.context, instead="--api-server URL")
    check_api_server(source, warn)
    require_node_dirs(config.kubelet_dir, config.cdi_dir)
    writable_dir("--state-dir", config.state_dir, file_modes.PRIVATE_DIR)
    writable_dir("--cdi-dir", config.cdi_dir, file_modes.CDI_DIR)
    vendors = [v.strip() for v in config.vendors.split(",") if v.strip()] if config.vendors else None
    profile = None
    if config.profile:  # simulation only: a real node does not load the profile reader (YAML input layer)
        from dra_driver.backend.hardware_profiles import load_profile

        profile = load_profile(config.profile)
    backend_settings = BackendSettings(
        node_name=config.node_name, partitioning=config.partitioning, state_dir=config.state_dir, driver_root=config.driver_root,
        host_driver_root=_absolute("--host-driver-root", config.host_driver_root),
        nvidia_cdi_hook_path=str(_absolute("--nvidia-cdi-hook-path", config.nvidia_cdi_hook_path) or "") or None,
        mps_exclusive_compute=config.mps_compute_mode == "exclusive-process", consumable_gpu_memory=config.consumable_gpu_memory,
    )  # fmt: skip
    if simulated is not None:
        backend_settings = dataclasses.replace(backend_settings, dev_root=simulated.dev_root, simulated_root=simulated.path)
    opened = open_backends(backend_settings, profile, vendors)
    for problem in opened.unavailable:
        log.warning("vendor backend unavailable", extra=fields(vendor=problem.vendor, reason=problem.reason))
    if not opened.backends:
        reasons = "; ".join(str(p) for p in opened.unavailable) or "no backend installed"
        raise DraError(f"no vendor backend can run on this node: {reasons}")
    try:
        settings = PluginSettings(
            node_name=config.node_name, kubelet_dir=config.kubelet_dir, cdi_dir=config.cdi_dir, pod_uid=config.pod_uid, state_dir=config.state_dir,
            device_nodes=simulated.make_device_nodes if simulated is not None else None, flags=recorded_flags(config),
        )
        guard, conflicts = DevicePluginGuard(coexistence_settings(config)), ConflictBoard()
        return Daemon(
            opened.backends,
            None,
            settings,
            metrics_address=config.metrics_bind_address,
            connect=lambda: connect_api(config, guard, conflicts),
            guard=guard,
            conflicts=conflicts,
            device_metrics_interval=config.device_metrics_interval,
        )
    except BaseException:  # no daemon owns the backends: close them here (a simulated one's scratch directory with them)
        opened.close()
        raise


def check_api_server(source: ApiSource, warn: Callable[[str], None] = _log_warning) -> None:
    """Before anything is created: a server that lacks resource.k8s.io/v1 stops the start with one line (ClusterError,
    exit 3); an outage or refused credentials only warn (the publisher retries with backoff, prepares wait for it).
    In a pod the check needs no kubernetes client import, which stays after the sockets serve."""
    from dra_driver.kube.server_check import ClusterError, check_source

    try:
        check_source(source)
    except ClusterError as exc:
        if exc.permanent:
            raise
        warn(f"{exc}; starting anyway, publishing retries with backoff")


def require_node_dirs(kubelet_dir: Path, cdi_dir: Path) -> None:
    """The kubelet's plugin directories and the container runtime's CDI directory belong to them: made here, they would
    hide a wrong --kubelet-dir/--cdi-dir (or a machine that is not a node) behind a daemon nobody calls, and make
    `doctor` pass its kubelet check. UsageError naming what is missing and the fix; nothing is created."""
    missing = [path for path in (kubelet_dir / "plugins_registry", kubelet_dir / "plugins") if not path.is_dir()]
    if missing:
        raise UsageError(f"no kubelet here: {' and '.join(map(str, missing))} missing; pass the kubelet's --root-dir as --kubelet-dir "
                         "(in a pod, mount the host's plugins_registry and plugins directories)")  # fmt: skip
    if not cdi_dir.exists():  # something else in its place: writable_dir names that
        raise UsageError(f"--cdi-dir {cdi_dir}: does not exist; create it where the container runtime reads CDI specs "
                         "(its cdi_spec_dirs: /etc/cdi, /var/run/cdi) or point --cdi-dir at one")  # fmt: skip


def coexistence_settings(config: DaemonSettings) -> CoexistenceSettings:
    socket = config.pod_resources_socket or default_pod_resources_socket(config.kubelet_dir)
    return CoexistenceSettings(config.kubelet_dir, socket, Offer.parse(config.offer_devices))


def connect_api(config: DaemonSettings, guard: DevicePluginGuard | None = None, conflicts: ConflictBoard | None = None) -> ApiWiring:
    """The kubernetes client and what uses it: the claim reader, one slice publisher per backend, the claim cache."""
    from dra_driver.kube.claims import ClaimReader
    from dra_driver.kube.client import JsonApi, load_configuration
    from dra_driver.node.publisher.daemon_adapter import publisher_factory

    try:
        configuration = load_configuration(base_url=config.api_server, kubeconfig=config.kubeconfig, context=config.context)
    except DraError:
        raise
    except Exception as exc:  # a malformed kubeconfig or service-account file: a clear line, not a traceback
        raise DraError(
            f"cannot load the API client configuration ({api_source(config.api_server, config.kubeconfig, config.context).kind}): {exc}"
        ) from exc
    configuration.connection_pool_maxsize = 32  # one connection per concurrent prepare worker
    api = JsonApi(configuration)
    if guard is not None:
        guard.set_node(read_node(api, config.node_name))
    claim_cache = None
    if config.claim_cache:  # off by default: its module and the reflector's stay out of the daemon's memory then
        from dra_driver.kube.claim_cache import ClaimCache

        claim_cache = ClaimCache(api)
    return ApiWiring(
        claims=ClaimReader(api),
        publisher_factory=publisher_factory(api, config.node_name, guard=guard, conflicts=conflicts),
        claim_cache=claim_cache,
    )


def read_node(api: JsonApi, node_name: str) -> dict[str, object] | None:
    """The Node (its allocatable names device-plugin resources); None when it cannot be read (logged)."""
    try:
        return api.request("GET", f"/api/v1/nodes/{node_name}")
    except Exception as exc:  # RBAC or a missing Node: the kubelet's own sources still count
        log.warning("cannot read the Node to find device-plugin resources", extra=fields(node=node_name, error=str(exc)))
        return None


def open_simulated_root(config: DaemonSettings) -> SimulatedRoot | None:
    """--simulated-root: only with --profile (a real node's device nodes are the kernel's), and --profile only with it,
    so a simulated node is consistent on its own: without a root, its CDI specs would name device nodes no host has
    and the container runtime would refuse every pod after prepare succeeded. Its nodes for specs already there."""
    if config.profile and config.simulated_root is None:
        raise UsageError(
            f"--profile {config.profile} needs --simulated-root: pass a host path mounted at the same path in the pod "
            "(--simulated-root /var/run/dra-driver-sim, as deploy/overlays/simulated does) for the device nodes its CDI "
            f"specs name, or --simulated-root {NO_SIMULATED_ROOT} where no container runtime reads the specs (tests, benchmarks)"
        )
    if config.simulated_root is None or config.simulated_root == NO_SIMULATED_ROOT:
        return None
    if not config.profile:
        raise UsageError("--simulated-root needs --profile: it holds the device nodes and driver files of simulated hardware")
    from dra_driver.simulation.node import SimulatedRoot

    simulated = SimulatedRoot(Path(config.simulated_root))
    try:
        simulated.make_nodes_of_specs(config.cdi_dir)
    except DraError:
        simulated.release(config.cdi_dir, config.state_dir)
        raise
    return simulated
