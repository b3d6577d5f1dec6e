"""`dra-driver fleet-exporter`: the cluster's DRA state as Prometheus metrics (dra_fleet_*, docs/metrics.md).

Keeps ResourceSlices, ResourceClaims, DeviceClasses and Nodes with one LIST and one WATCH each (resumed on
resourceVersion, re-listed on 410 Gone; read only: get/list/watch) and serves /metrics, /readyz and /livez:
devices per node, pool, driver and DeviceClass (total, allocated, free, tainted), consumable capacity,
pending claims with the reason explain's engine gives, and the nodes whose slices are stale or missing.
The cluster: --kubeconfig/--context, else $KUBECONFIG, ~/.kube/config, or the pod's service account.
Runs until SIGTERM or SIGINT (exit 0). Exit codes: 2 bad arguments or kubeconfig.
"""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any

from dra_driver.cli import failures
from dra_driver.common.errors import DraError
from dra_driver.node.metrics_http import BindAddress

DEFAULT_BIND = ":8080"


def _bind_address(text: str) -> BindAddress:
    try:
        address = BindAddress.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if not address.enabled:
        raise argparse.ArgumentTypeError(f"{text!r}: the exporter only serves metrics; give a port (e.g. :8080)")
    return address


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.1 <= value <= 600:
        raise argparse.ArgumentTypeError(f"{text!r}: give seconds between 0.1 and 600")
    return value


def add_parser(subparsers: Any) -> None:
    from dra_driver.fleet.exporter import DEFAULT_MIN_INTERVAL_S

    parser = subparsers.add_parser(
        "fleet-exporter",
        help="serve the cluster's DRA devices, capacity, pending claims and slice health as Prometheus metrics",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kubeconfig", help="the cluster to watch (default: $KUBECONFIG, ~/.kube/config, then the pod's service account)")
    parser.add_argument("--context", help="the kubeconfig context to use (default: its current-context)")
    parser.add_argument("--metrics-bind-address", type=_bind_address, default=BindAddress.parse(DEFAULT_BIND), metavar="HOST:PORT",
                        help=f"serve /metrics, /readyz and /livez here (default {DEFAULT_BIND}: every address of the pod)")  # fmt: skip
    parser.add_argument("--refresh-interval", type=_interval, default=DEFAULT_MIN_INTERVAL_S, metavar="SECONDS",
                        help="rebuild the metrics at most this often after a change (default: %(default)s)")  # fmt: skip
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dra_driver.fleet.exporter import FleetExporter
    from dra_driver.kube.api_source import api_source
    from dra_driver.kube.client import JsonApi, load_configuration, server_label
    from dra_driver.node.metrics_http import HttpEndpoint, Response

    try:
        source = api_source(kubeconfig=args.kubeconfig, context=args.context)
        configuration = load_configuration(source=source)
    except DraError as exc:
        return failures.report(exc)
    exporter = FleetExporter(JsonApi(configuration), min_interval=args.refresh_interval)
    registry = _registry(exporter)

    def metrics() -> Response:
        from dra_driver.common.prometheus_text import CONTENT_TYPE, generate_text

        return Response(200, generate_text(registry), CONTENT_TYPE)

    def readyz() -> Response:
        return Response(200, b"ok\n") if exporter.ready else Response(503, b"not ready: the first lists are not done\n")

    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    exporter.start()
    endpoint = HttpEndpoint(args.metrics_bind_address, {"/metrics": metrics, "/readyz": readyz, "/livez": lambda: Response(200, b"ok\n")}).start()
    failures.info(f"watching {server_label(source, configuration)}; metrics on {args.metrics_bind_address}")
    try:
        stop.wait()
    finally:
        endpoint.stop()
        exporter.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return failures.EXIT_OK


def _registry(exporter: Any) -> Any:
    from dra_driver.common.prometheus import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(exporter)
    return registry
