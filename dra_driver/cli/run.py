"""`dra-driver run`: the kubelet plugin daemon of a node: its flags in, the daemon built by
dra_driver.node.assembly, one line out, then the daemon until SIGTERM."""

from __future__ import annotations

import argparse
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from dra_driver.backend.registry import OpenedBackends
from dra_driver.cli import failures
from dra_driver.common.errors import DraError
from dra_driver.kube.api_source import ApiSource, api_source
from dra_driver.node.assembly import build_daemon, open_simulated_root
from dra_driver.node.daemon import Daemon
from dra_driver.node.settings import DaemonSettings, add_arguments

if TYPE_CHECKING:  # a real node never imports the simulation's modules
    from dra_driver.simulation.node import SimulatedRoot


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        description="The node daemon (the DaemonSet's container): for every vendor whose hardware is found (or --profile simulates), "
        "register a kubelet plugin, answer NodePrepareResources/NodeUnprepareResources by writing CDI specs, and publish the node's "
        "ResourceSlices. Runs until SIGTERM; the kubelet's directories must exist (it creates only its own: --state-dir, --cdi-dir).",
    )
    add_daemon_arguments(parser)
    parser.set_defaults(func=run)


def add_daemon_arguments(parser: argparse.ArgumentParser) -> None:
    """run's flags, built from the one settings table (dra_driver.node.settings); doctor takes them too."""
    add_arguments(parser)


def announce(daemon: Daemon, config: DaemonSettings, source: ApiSource) -> None:
    """One line on stderr, whatever the log level: what this process serves, for which node, to which API server."""
    drivers = ", ".join(backend.driver_name for backend in daemon.backends)
    simulated = f", simulating profile {config.profile}" if config.profile else ""
    failures.info(
        f"serving {drivers} on node {config.node_name}{simulated}; sockets under {config.kubelet_dir}, CDI specs in {config.cdi_dir}; API server: "
        f"{source.describe()}"
    )


def run(parsed: argparse.Namespace) -> int:
    config = DaemonSettings.from_namespace(parsed)
    # A SIGTERM/SIGINT while the backends open (a simulated one makes its scratch dir then) is held until
    # the daemon exists, which then stops before starting; from start on the daemon's own handlers answer.
    requested = threading.Event()
    deliver: list[Callable[[], None]] = [requested.set]
    previous = {sig: signal.signal(sig, lambda *_: deliver[0]()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _build_and_run(config, requested, deliver)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _build_and_run(config: DaemonSettings, requested: threading.Event, deliver: list[Callable[[], None]]) -> int:
    try:
        simulated = open_simulated_root(config)
    except DraError as exc:
        return failures.report(exc)
    try:
        return _run_daemon(config, requested, deliver, simulated)
    finally:
        if simulated is not None:
            simulated.release(config.cdi_dir, config.state_dir)


def _run_daemon(config: DaemonSettings, requested: threading.Event, deliver: list[Callable[[], None]], simulated: SimulatedRoot | None) -> int:
    try:
        daemon = build_daemon(config, simulated, warn=failures.warning)
    except DraError as exc:
        return failures.report(exc)
    announce(daemon, config, api_source(config.api_server, config.kubeconfig, config.context))
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
