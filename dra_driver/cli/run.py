"""`dra-driver run`: the kubelet plugin daemon of a node: its flags in, the daemon built by
dra_driver.node.assembly, one line out, then the daemon until SIGTERM."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dra_driver.backend.registry import OpenedBackends
from dra_driver.cli import failures
from dra_driver.common.errors import DraError
from dra_driver.kube.api_source import ApiSource, api_source
from dra_driver.node.assembly import NO_SIMULATED_ROOT, build_daemon, open_simulated_root
from dra_driver.node.daemon import Daemon
from dra_driver.node.device_metrics import DEFAULT_INTERVAL_S as DEVICE_METRICS_INTERVAL_S, MIN_INTERVAL_S as DEVICE_METRICS_MIN_S
from dra_driver.node.metrics_http import BindAddress
from dra_driver.node.plugin.sockets import DEFAULT_KUBELET_DIR, DEFAULT_STATE_DIR

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


def _simulated_root(text: str) -> Path | str:
    return NO_SIMULATED_ROOT if text == NO_SIMULATED_ROOT else Path(text)


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


def announce(daemon: Daemon, args: argparse.Namespace, source: ApiSource) -> None:
    """One line on stderr, whatever the log level: what this process serves, for which node, to which API server."""
    drivers = ", ".join(backend.driver_name for backend in daemon.backends)
    simulated = f", simulating profile {args.profile}" if args.profile else ""
    failures.info(f"serving {drivers} on node {args.node_name}{simulated}; sockets under {args.kubelet_dir}, CDI specs in {args.cdi_dir}; API server: {source.describe()}")


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


def _run_daemon(args: argparse.Namespace, requested: threading.Event, deliver: list[Callable[[], None]], simulated: SimulatedRoot | None) -> int:
    try:
        daemon = build_daemon(args, simulated, warn=failures.warning)
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
