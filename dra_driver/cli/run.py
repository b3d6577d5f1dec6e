"""`dra-driver run`: the kubelet plugin daemon of a node.

Start-up is on the kubelet's clock (a prepare it sends before the registration
socket answers fails, and the pod is backed off for ~40 s), so this module
imports only what serving the sockets needs; the kubernetes client, the slice
publisher and the claim cache are loaded in `connect`, which the daemon calls
once every driver serves (dra_driver.node.daemon).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dra_driver.node import file_modes
from dra_driver.node.daemon import ApiWiring, Daemon
from dra_driver.common.errors import DraError, UsageError
from dra_driver.cli import failures
from dra_driver.kube.api_source import ApiSource, api_source
from dra_driver.common.logs import fields
from dra_driver.node.device_metrics import DEFAULT_INTERVAL_S as DEVICE_METRICS_INTERVAL_S, MIN_INTERVAL_S as DEVICE_METRICS_MIN_S
from dra_driver.node.metrics_http import BindAddress
from dra_driver.model.names import dns_subdomain_problem, uid_problem
from dra_driver.node.checks.coexistence import CoexistenceSettings, DevicePluginGuard, Offer
from dra_driver.node.checks.pod_resources import default_socket as default_pod_resources_socket
from dra_driver.node.checks.same_name import ConflictBoard
from dra_driver.node.plugin.driver import PluginSettings
from dra_driver.node.plugin.sockets import DEFAULT_KUBELET_DIR, DEFAULT_STATE_DIR
from dra_driver.backend.registry import OpenedBackends, open_backends
from dra_driver.backend.interface import BackendSettings

if TYPE_CHECKING:  # a real node never imports the simulation's modules
    from dra_driver.simulation.node import SimulatedRoot

log = logging.getLogger(__name__)

METRICS_ENV = "DRA_DRIVER_METRICS_BIND_ADDRESS"


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "run",
        description="The node daemon (the DaemonSet's container): for every vendor whose hardware is found (or --profile simulates), "
        "register a kubelet plugin, answer NodePrepareResources/NodeUnprepareResources by writing CDI specs, and publish the node's "
        "ResourceSlices. Runs until SIGTERM; the kubelet's directories must exist (it creates only its own: --state-dir, --cdi-dir).",
    )
    add_daemon_arguments(parser)
    parser.set_defaults(func=run)


def add_daemon_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME") or socket.gethostname(), help="this node's name (default: $NODE_NAME or the host name)")
    parser.add_argument("--kubelet-dir", type=Path, default=DEFAULT_KUBELET_DIR, help="kubelet root dir (default /var/lib/kubelet)")
    parser.add_argument("--cdi-dir", type=Path, default=Path("/var/run/cdi"), help="where CDI specs are written (default /var/run/cdi)")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default, as kubectl: $KUBECONFIG, ~/.kube/config, then the in-cluster service account)")
    parser.add_argument("--context", default=None, help="the kubeconfig context to use (default: its current-context)")
    parser.add_argument("--api-server", default=None, help="API server base URL without auth (tests, kubectl proxy)")
    parser.add_argument("--vendors", default=None, help="comma-separated vendors (default: every installed backend that finds hardware)")
    parser.add_argument("--profile", default=None, help="simulate this hardware profile instead of the real hardware")
    parser.add_argument(
        "--partitioning", choices=("static", "dynamic"), default="static",
        help="static: publish the GPUs and the partitions that exist (MIG devices, AMD partitions) as they are; dynamic: publish "
        "every MIG placement and AMD partition mode with shared counters, and create the partition a claim was given at prepare "
        "(needs the DRAPartitionableDevices gate; default: %(default)s)",
    )
    parser.add_argument(
        "--simulated-root", type=_simulated_root, default=None, metavar="PATH|none",
        help="needed with --profile: a host path, mounted at the same path in the pod, for the simulated device nodes "
        "(character nodes with /dev/null's numbers) and driver files the CDI specs name, kept while prepared claims use it "
        "(deploy/overlays/simulated uses /var/run/dra-driver-sim); or 'none' where no container runtime reads the specs "
        "(tests, benchmarks): the simulation's files then stay in its private scratch dir",
    )
    parser.add_argument(
        "--metrics-bind-address", type=_bind_address, default=os.environ.get(METRICS_ENV) or "0", metavar="HOST:PORT",
        help="serve /metrics, /readyz and /livez here: 127.0.0.1:8080, :8080 for every address of the pod (or, with host "
        f"networking, of the node), 0 for off; a busy port is retried in the background (default: ${METRICS_ENV}, else off)",
    )
    parser.add_argument("--metrics-port", type=int, default=None, help="the same as --metrics-bind-address :PORT (kept for older manifests)")
    parser.add_argument(
        "--device-metrics-interval", type=_device_metrics_interval, default=DEVICE_METRICS_INTERVAL_S, metavar="SECONDS",
        help="read each device's utilization, memory, power, temperature and error counters this often while metrics are "
        "served (docs/metrics.md); 0 turns the device readings off (default: %(default)s)",
    )
    parser.add_argument("--pod-uid", default=os.environ.get("POD_UID") or None, help="per-pod socket names for rolling updates (default: $POD_UID)")
    parser.add_argument(
        "--state-dir", type=Path, default=DEFAULT_STATE_DIR,
        help="runtime state that is void after a reboot, best on a tmpfs: each driver's checkpoint and locks "
        "(<state-dir>/<driver>/) and backend records such as the MIG instances the driver created (default: %(default)s)",
    )
    parser.add_argument(
        "--driver-root",
        type=Path,
        default=Path(os.environ.get("DRIVER_ROOT") or "/"),
        help="where the host's vendor driver files are mounted (default: $DRIVER_ROOT or /); the NVIDIA backend loads libnvidia-ml.so.1 from there",
    )
    parser.add_argument(
        "--host-driver-root",
        type=Path,
        default=Path(os.environ["HOST_DRIVER_ROOT"]) if os.environ.get("HOST_DRIVER_ROOT") else None,
        help="the driver root as the host's container runtime sees it, for paths in CDI specs: / or a GPU Operator root "
        "such as /run/nvidia/driver (default: $HOST_DRIVER_ROOT, else the --driver-root value)",
    )
    parser.add_argument(
        "--nvidia-cdi-hook-path",
        default=os.environ.get("NVIDIA_CDI_HOOK_PATH") or None,
        help="host path of NVIDIA's CDI hook (nvidia-cdi-hook, or nvidia-ctk): specs then create the soname links and update "
        "the container's linker cache through it; without it each library is also mounted at its soname path "
        "(default: $NVIDIA_CDI_HOOK_PATH, else none)",
    )
    parser.add_argument(
        "--pod-resources-socket",
        type=Path,
        default=None,
        help="the kubelet's PodResources socket, read to find device plugins and the pods holding their devices "
        "(default: <kubelet-dir>/pod-resources/kubelet.sock)",
    )
    parser.add_argument(
        "--offer-devices",
        default=os.environ.get("OFFER_DEVICES") or None,
        help="comma-separated device names, UUIDs or PCI bus IDs this driver offers even though a device plugin of its vendor "
        "runs on the node (a deliberate split: configure the device plugin to leave them alone); devices a device-plugin pod "
        "holds are never offered (default: $OFFER_DEVICES, else none: every device a device plugin hands out is withheld)",
    )
    parser.add_argument(
        "--mps-compute-mode",
        choices=("exclusive-process", "unchanged"),
        default=os.environ.get("MPS_COMPUTE_MODE") or "exclusive-process",
        help="what an MPS claim does to the compute mode of a GPU it holds alone: exclusive-process switches it to "
        "EXCLUSIVE_PROCESS (only the MPS server opens the GPU) and back on unprepare, as NVIDIA's driver does; "
        "unchanged never touches it (default: $MPS_COMPUTE_MODE, else exclusive-process)",
    )
    parser.add_argument(
        "--consumable-gpu-memory",
        action=argparse.BooleanOptionalAction,
        default=os.environ.get("CONSUMABLE_GPU_MEMORY", "").lower() in ("1", "true", "yes"),
        help="publish whole NVIDIA GPUs with allowMultipleAllocations and a `memory` request policy (default: the whole "
        "memory, min 1Gi, step 1Mi), so several claims share one GPU, each held to its share through its own MPS control "
        "daemon; needs the DRAConsumableCapacity feature gate (falls back to one claim per GPU without it) "
        "(default: off, or $CONSUMABLE_GPU_MEMORY=true)",
    )
    parser.add_argument(
        "--claim-cache",
        action=argparse.BooleanOptionalAction,
        default=os.environ.get("CLAIM_CACHE", "").lower() in ("1", "true", "yes"),
        help="serve prepare from a LIST+WATCH cache of allocated ResourceClaims (all namespaces) instead of one GET per claim; "
        "falls back to a GET whenever the cache is not sure (default: off, or $CLAIM_CACHE=true; needs list/watch on resourceclaims)",
    )


NO_SIMULATED_ROOT = "none"


def _simulated_root(text: str) -> Path | str:
    return NO_SIMULATED_ROOT if text == NO_SIMULATED_ROOT else Path(text)


# The flags the daemon records with its instance lock (instance_lock.py), which `doctor` adopts: what decides
# which node, which hardware and which directories the daemon serves.
RECORDED_FLAGS = (
    "node_name", "kubelet_dir", "cdi_dir", "state_dir", "driver_root", "profile", "partitioning", "simulated_root", "vendors",
    "offer_devices", "pod_resources_socket", "api_server", "kubeconfig", "context", "pod_uid",
)  # fmt: skip


def recorded_flags(args: argparse.Namespace) -> dict[str, str]:
    """The effective values of RECORDED_FLAGS (after environment defaults), as `--flag` -> text; paths made absolute."""
    flags = {}
    for dest in RECORDED_FLAGS:
        value = getattr(args, dest, None)
        if value is not None:
            flags["--" + dest.replace("_", "-")] = os.path.abspath(value) if isinstance(value, Path) else str(value)
    return flags


def _bind_address(text: str) -> BindAddress:
    try:
        return BindAddress.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (--metrics-bind-address or ${METRICS_ENV})") from exc


def _device_metrics_interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value != 0 and not (DEVICE_METRICS_MIN_S <= value <= 3600):
        raise argparse.ArgumentTypeError(f"{text!r}: give seconds between {DEVICE_METRICS_MIN_S:g} and 3600, or 0 to turn device readings off")
    return value


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


def build_daemon(args: argparse.Namespace, simulated: SimulatedRoot | None = None) -> Daemon:
    """Open the backends described by the arguments; raise DraError if nothing can run.

    With `simulated` (--simulated-root), simulated backends name device nodes and driver files on that host path.

    The API client is only located here (a missing kubeconfig fails now); the daemon builds it with
    `connect_api` after the sockets serve.
    """
    check_identity(args.node_name, args.pod_uid)
    source = api_source(args.api_server, args.kubeconfig, args.context, instead="--api-server URL")
    check_api_server(source)
    require_node_dirs(args.kubelet_dir, args.cdi_dir)
    writable_dir("--state-dir", args.state_dir, file_modes.PRIVATE_DIR)
    writable_dir("--cdi-dir", args.cdi_dir, file_modes.CDI_DIR)
    vendors = [v.strip() for v in args.vendors.split(",") if v.strip()] if args.vendors else None
    profile = None
    if args.profile:  # simulation only: a real node does not load the profile reader (YAML input layer)
        from dra_driver.backend.hardware_profiles import load_profile

        profile = load_profile(args.profile)
    backend_settings = BackendSettings(
        node_name=args.node_name, partitioning=args.partitioning, state_dir=args.state_dir, driver_root=args.driver_root,
        host_driver_root=_absolute("--host-driver-root", args.host_driver_root),
        nvidia_cdi_hook_path=str(_absolute("--nvidia-cdi-hook-path", args.nvidia_cdi_hook_path) or "") or None,
        mps_exclusive_compute=args.mps_compute_mode == "exclusive-process", consumable_gpu_memory=args.consumable_gpu_memory,
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
            node_name=args.node_name, kubelet_dir=args.kubelet_dir, cdi_dir=args.cdi_dir, pod_uid=args.pod_uid, state_dir=args.state_dir,
            device_nodes=simulated.make_device_nodes if simulated is not None else None, flags=recorded_flags(args),
        )
        metrics = BindAddress("", args.metrics_port) if args.metrics_port is not None else args.metrics_bind_address
        guard, conflicts = DevicePluginGuard(coexistence_settings(args)), ConflictBoard()
        return Daemon(
            opened.backends, None, settings, metrics_address=metrics, connect=lambda: connect_api(args, guard, conflicts), guard=guard, conflicts=conflicts,
            device_metrics_interval=args.device_metrics_interval,
        )
    except BaseException:  # no daemon owns the backends: close them here (a simulated one's scratch directory with them)
        opened.close()
        raise


def check_api_server(source: ApiSource) -> None:
    """Before anything is created: a server that lacks resource.k8s.io/v1 stops the start with one line (ClusterError,
    exit 3); an outage or refused credentials only warn (the publisher retries with backoff, prepares wait for it).
    In a pod the check needs no kubernetes client import, which stays after the sockets serve."""
    from dra_driver.kube.server_check import ClusterError, check_source

    try:
        check_source(source)
    except ClusterError as exc:
        if exc.permanent:
            raise
        failures.warning(f"{exc}; starting anyway, publishing retries with backoff")


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


def announce(daemon: Daemon, args: argparse.Namespace, source: ApiSource) -> None:
    """One line on stderr, whatever the log level: what this process serves, for which node, to which API server."""
    drivers = ", ".join(backend.driver_name for backend in daemon.backends)
    simulated = f", simulating profile {args.profile}" if args.profile else ""
    failures.info(f"serving {drivers} on node {args.node_name}{simulated}; sockets under {args.kubelet_dir}, CDI specs in {args.cdi_dir}; API server: {source.describe()}")


def coexistence_settings(args: argparse.Namespace) -> CoexistenceSettings:
    socket = args.pod_resources_socket or default_pod_resources_socket(args.kubelet_dir)
    return CoexistenceSettings(args.kubelet_dir, socket, Offer.parse(args.offer_devices))


def connect_api(args: argparse.Namespace, guard: DevicePluginGuard | None = None, conflicts: ConflictBoard | None = None) -> ApiWiring:
    """The kubernetes client and what uses it: the claim reader, one slice publisher per backend, the claim cache."""
    from dra_driver.kube.claim_cache import ClaimCache
    from dra_driver.kube.claims import ClaimReader
    from dra_driver.kube.client import api_client_for, load_configuration
    from dra_driver.node.publisher.daemon_adapter import publisher_factory

    try:
        configuration = load_configuration(base_url=args.api_server, kubeconfig=args.kubeconfig, context=args.context)
    except DraError:
        raise
    except Exception as exc:  # a malformed kubeconfig or service-account file: a clear line, not a traceback
        raise DraError(f"cannot load the API client configuration ({api_source(args.api_server, args.kubeconfig, args.context).kind}): {exc}") from exc
    configuration.connection_pool_maxsize = 32  # one connection per concurrent prepare worker
    api_client = api_client_for(configuration)
    if guard is not None:
        guard.set_node(read_node(api_client, args.node_name))
    return ApiWiring(
        claims=ClaimReader(api_client),
        publisher_factory=publisher_factory(api_client, args.node_name, guard=guard, conflicts=conflicts),
        claim_cache=ClaimCache(api_client) if args.claim_cache else None,
    )


def read_node(api_client: object, node_name: str) -> dict[str, object] | None:
    """The Node (its allocatable names device-plugin resources); None when it cannot be read (logged)."""
    from dra_driver.kube.client import JsonApi

    try:
        return JsonApi(api_client).request("GET", f"/api/v1/nodes/{node_name}")  # type: ignore[arg-type]
    except Exception as exc:  # RBAC or a missing Node: the kubelet's own sources still count
        log.warning("cannot read the Node to find device-plugin resources", extra=fields(node=node_name, error=str(exc)))
        return None


def run(args: argparse.Namespace) -> int:
    # A SIGTERM/SIGINT while the backends open (a simulated one makes its scratch dir then) is held until
    # the daemon exists, which then stops before starting; from start on the daemon's own handlers answer.
    requested = threading.Event()
    deliver: list[Callable[[], None]] = [requested.set]
    previous = {sig: signal.signal(sig, lambda *_: deliver[0]()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _build_and_run(args, requested, deliver)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _build_and_run(args: argparse.Namespace, requested: threading.Event, deliver: list[Callable[[], None]]) -> int:
    try:
        simulated = open_simulated_root(args)
    except DraError as exc:
        return failures.report(exc)
    try:
        return _run_daemon(args, requested, deliver, simulated)
    finally:
        if simulated is not None:
            simulated.release(args.cdi_dir, args.state_dir)


def open_simulated_root(args: argparse.Namespace) -> SimulatedRoot | None:
    """--simulated-root: only with --profile (a real node's device nodes are the kernel's), and --profile only with it,
    so a simulated node is consistent on its own: without a root, its CDI specs would name device nodes no host has
    and the container runtime would refuse every pod after prepare succeeded. Its nodes for specs already there."""
    if args.profile and args.simulated_root is None:
        raise UsageError(f"--profile {args.profile} needs --simulated-root: pass a host path mounted at the same path in the pod "
                         "(--simulated-root /var/run/dra-driver-sim, as deploy/overlays/simulated does) for the device nodes its CDI "
                         f"specs name, or --simulated-root {NO_SIMULATED_ROOT} where no container runtime reads the specs (tests, benchmarks)")  # fmt: skip
    if args.simulated_root is None or args.simulated_root == NO_SIMULATED_ROOT:
        return None
    if not args.profile:
        raise UsageError("--simulated-root needs --profile: it holds the device nodes and driver files of simulated hardware")
    from dra_driver.simulation.node import SimulatedRoot

    simulated = SimulatedRoot(args.simulated_root)
    try:
        simulated.make_nodes_of_specs(args.cdi_dir)
    except DraError:
        simulated.release(args.cdi_dir, args.state_dir)
        raise
    return simulated


def _run_daemon(args: argparse.Namespace, requested: threading.Event, deliver: list[Callable[[], None]], simulated: SimulatedRoot | None) -> int:
    try:
        daemon = build_daemon(args, simulated)
    except DraError as exc:
        return failures.report(exc)
    announce(daemon, args, api_source(args.api_server, args.kubeconfig, args.context))
    deliver[0] = daemon.request_stop
    if requested.is_set():
        daemon.request_stop()
    try:
        return daemon.run_until_signal()
    except DraError as exc:  # e.g. the API client cannot be built: a clear line, not a traceback
        daemon.stop()
        return failures.report(exc)
    finally:
        OpenedBackends(daemon.backends).close()
