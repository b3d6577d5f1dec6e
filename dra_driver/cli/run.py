"""`dra-driver run`: the kubelet plugin daemon of a node.

Start-up is on the kubelet's clock (a prepare it sends before the registration
socket answers fails, and the pod is backed off for ~40 s), so this module
imports only what serving the sockets needs; the kubernetes client, the slice
publisher and the claim cache are loaded in `connect`, which the daemon calls
once every driver serves (dra_driver.daemon).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from dra_driver.daemon import ApiWiring, Daemon
from dra_driver.errors import DraError
from dra_driver.kube.api_source import api_source
from dra_driver.logs import fields
from dra_driver.model.names import dns_subdomain_problem, uid_problem
from dra_driver.plugin.driver import PluginSettings
from dra_driver.plugin.sockets import DEFAULT_KUBELET_DIR, DEFAULT_STATE_DIR
from dra_driver.registry import OpenedBackends, open_backends
from dra_driver.vendor import BackendSettings

log = logging.getLogger(__name__)


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("run", help="serve the kubelet plugin (registration + DRA gRPC) for every vendor found")
    add_daemon_arguments(parser)
    parser.set_defaults(func=run)


def add_daemon_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME") or socket.gethostname(), help="this node's name (default: $NODE_NAME or the host name)")
    parser.add_argument("--kubelet-dir", type=Path, default=DEFAULT_KUBELET_DIR, help="kubelet root dir (default /var/lib/kubelet)")
    parser.add_argument("--cdi-dir", type=Path, default=Path("/var/run/cdi"), help="where CDI specs are written (default /var/run/cdi)")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster service account, then $KUBECONFIG)")
    parser.add_argument("--api-server", default=None, help="API server base URL without auth (tests, kubectl proxy)")
    parser.add_argument("--vendors", default=None, help="comma-separated vendors (default: every installed backend that finds hardware)")
    parser.add_argument("--profile", default=None, help="simulate this hardware profile instead of the real hardware")
    parser.add_argument("--partitioning", choices=("static", "dynamic"), default="static")
    parser.add_argument("--metrics-port", type=int, default=0, help="Prometheus /metrics port (0 = off)")
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


def writable_dir(flag: str, path: Path) -> None:
    """Create `path` if needed and prove it writable, or raise DraError naming the flag and the fix.

    Checked before anything starts: otherwise every driver would fail its start (state dir) or every
    claim its prepare (CDI dir) with a bare OSError.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".dra-driver-write-check-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except FileExistsError as exc:
        raise DraError(f"{flag} {path}: exists and is not a directory; point {flag} at a writable directory") from exc
    except OSError as exc:
        raise DraError(f"{flag} {path}: cannot create or write it ({exc.strerror or exc}); point {flag} at a writable directory") from exc


def check_identity(node_name: str, pod_uid: str | None) -> None:
    """The node name becomes the pool name claims must match, the pod UID part of socket file names: both are
    checked against the Kubernetes rules before use."""
    problem = dns_subdomain_problem(node_name)
    if problem is not None:
        raise DraError(f"--node-name {problem}; pass the Kubernetes node name (spec.nodeName, through the downward API as $NODE_NAME)")
    problem = uid_problem(pod_uid) if pod_uid is not None else None
    if problem is not None:
        raise DraError(f"--pod-uid {problem}; pass the driver pod's metadata.uid (through the downward API as $POD_UID)")


def _absolute(flag: str, value: str | Path | None) -> Path | None:
    """A host path for CDI specs: runtimes reject relative ones, so refuse them here, naming the flag."""
    if value is None:
        return None
    path = Path(value)
    if not path.is_absolute() or ".." in path.parts:
        raise DraError(f"{flag} {value}: must be an absolute host path without '..' (CDI specs need absolute paths)")
    return path


def build_daemon(args: argparse.Namespace) -> Daemon:
    """Open the backends described by the arguments; raise DraError if nothing can run.

    The API client is only located here (a missing kubeconfig fails now); the daemon builds it with
    `connect_api` after the sockets serve.
    """
    check_identity(args.node_name, args.pod_uid)
    writable_dir("--state-dir", args.state_dir)
    writable_dir("--cdi-dir", args.cdi_dir)
    api_source(args.api_server, args.kubeconfig)
    vendors = [v.strip() for v in args.vendors.split(",") if v.strip()] if args.vendors else None
    profile = None
    if args.profile:  # simulation only: a real node does not load the profile reader (YAML input layer)
        from dra_driver.hardware_profiles import load_profile

        profile = load_profile(args.profile)
    backend_settings = BackendSettings(
        node_name=args.node_name, partitioning=args.partitioning, state_dir=args.state_dir, driver_root=args.driver_root,
        host_driver_root=_absolute("--host-driver-root", args.host_driver_root),
        nvidia_cdi_hook_path=str(_absolute("--nvidia-cdi-hook-path", args.nvidia_cdi_hook_path) or "") or None,
        mps_exclusive_compute=args.mps_compute_mode == "exclusive-process", consumable_gpu_memory=args.consumable_gpu_memory,
    )  # fmt: skip
    opened = open_backends(backend_settings, profile, vendors)
    for problem in opened.unavailable:
        log.warning("vendor backend unavailable", extra=fields(vendor=problem.vendor, reason=problem.reason))
    if not opened.backends:
        reasons = "; ".join(str(p) for p in opened.unavailable) or "no backend installed"
        raise DraError(f"no vendor backend can run on this node: {reasons}")
    try:
        settings = PluginSettings(
            node_name=args.node_name, kubelet_dir=args.kubelet_dir, cdi_dir=args.cdi_dir, pod_uid=args.pod_uid, state_dir=args.state_dir
        )
        return Daemon(opened.backends, None, settings, metrics_port=args.metrics_port, connect=lambda: connect_api(args))
    except BaseException:  # no daemon owns the backends: close them here (a simulated one's scratch directory with them)
        opened.close()
        raise


def connect_api(args: argparse.Namespace) -> ApiWiring:
    """The kubernetes client and what uses it: the claim reader, one slice publisher per backend, the claim cache."""
    from kubernetes import client

    from dra_driver.kube.claim_cache import ClaimCache
    from dra_driver.kube.claims import ClaimReader
    from dra_driver.kube.client import load_configuration
    from dra_driver.publisher.daemon_adapter import publisher_factory

    try:
        configuration = load_configuration(base_url=args.api_server, kubeconfig=args.kubeconfig)
    except DraError:
        raise
    except Exception as exc:  # a malformed kubeconfig or service-account file: a clear line, not a traceback
        raise DraError(f"cannot load the API client configuration ({api_source(args.api_server, args.kubeconfig).kind}): {exc}") from exc
    configuration.connection_pool_maxsize = 32  # one connection per concurrent prepare worker
    api_client = client.ApiClient(configuration)
    return ApiWiring(
        claims=ClaimReader(api_client),
        publisher_factory=publisher_factory(api_client, args.node_name),
        claim_cache=ClaimCache(api_client) if args.claim_cache else None,
    )


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
        daemon = build_daemon(args)
    except DraError as exc:
        print(f"dra-driver run: {exc}", file=sys.stderr)
        return 1
    deliver[0] = daemon.request_stop
    if requested.is_set():
        daemon.request_stop()
    try:
        return daemon.run_until_signal()
    except DraError as exc:  # e.g. a busy --metrics-port: a clear line, not a traceback
        print(f"dra-driver run: {exc}", file=sys.stderr)
        daemon.stop()
        return 1
    finally:
        OpenedBackends(daemon.backends).close()
