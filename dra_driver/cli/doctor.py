"""`dra-driver doctor`: check this node (or the driver's pod) and explain what keeps it from serving claims.

Checks the node as the driver daemon running on it sees it: the daemon records its effective flags (after
$DRA_DRIVER_NODE_NAME, ConfigMap and other environment defaults) with its instance lock under --state-dir, and the doctor
takes every flag not given on its own command line from there, so `kubectl exec ds/... -- dra-driver doctor`
checks the daemon's profile, simulated root, kubelet and CDI directories. Takes `run`'s flags (same names and
defaults, so a DaemonSet's arguments can be copied) plus where the container runtime's configuration is.
Exit code: 0 the node can serve claims (warnings allowed), 1 it cannot (at least one check failed), 2 bad flags
or input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from dra_driver.common.wording import plural
from dra_driver.cli.run import add_daemon_arguments
from dra_driver.node.assembly import RECORDED_FLAGS
from dra_driver.node.settings import NO_SIMULATED_ROOT
from dra_driver.common.errors import DraError
from dra_driver.node.checks import runtime_config
from dra_driver.node.checks.coexistence import Offer
from dra_driver.node.checks.doctor import DoctorReport, DoctorSettings, Status, run_checks
from dra_driver.node.checks.pod_resources import default_socket
from dra_driver.node.plugin.instance_lock import Holder, holders_under

EXIT_BAD_INPUT = 2
_LABEL = {Status.PASS: "PASS", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.UNSEEN: "SKIP"}
# run's flags the doctor reads; the others are accepted (a DaemonSet's arguments can be copied) and left out of --help.
_USED = frozenset(RECORDED_FLAGS)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "doctor",
        description="Checks the kubelet plugin directories and registration, the CDI directory and the container runtime's CDI "
        "configuration, the resource.k8s.io/v1 API, vendor libraries and device nodes, device plugins and same-name DRA drivers "
        "on the node, a running instance, and permissions, as the driver daemon running on the node sees them: every run flag "
        "not given here is taken from that daemon (its record under --state-dir). run's other flags are accepted and ignored. "
        "Exit code 0: the node can serve claims; 1: it cannot; 2: bad flags.",
    )
    add_daemon_arguments(parser)
    for action in parser._actions:
        if action.dest not in _USED and action.option_strings and action.dest != "help":
            action.help = argparse.SUPPRESS
    parser.add_argument(
        "--ignore-daemon", action="store_true", help="check with the flags given here (and run's defaults) only, not the running daemon's"
    )
    parser.add_argument("--dev-dir", type=Path, default=Path("/dev"), help="where the device nodes are (default /dev)")
    parser.add_argument(
        "--containerd-config", type=Path, default=runtime_config.DEFAULT_CONTAINERD_CONFIG, help="containerd's config.toml (default %(default)s)"
    )
    parser.add_argument(
        "--crio-config",
        type=Path,
        default=runtime_config.DEFAULT_CRIO_CONFIG,
        help="CRI-O's crio.conf; <file>.d/*.conf is read too (default %(default)s)",
    )
    parser.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text", help="text for people, json or yaml for tools")
    parser.set_defaults(func=run)


def _run_flag_defaults() -> dict[str, tuple[Any, Any]]:
    """run's flags as parsed from an empty command line: dest -> (default, type)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_daemon_arguments(parser)
    return {action.dest: (action.default, action.type) for action in parser._actions if action.dest in _USED}


def running_daemon(state_dir: Path, pod_uid: str | None) -> Holder | None:
    """The live daemon on `state_dir` whose record carries its flags: this pod's (same --pod-uid), else the newest."""
    live = [holder for holders in holders_under(state_dir).values() for holder in holders if holder.flags]
    mine = [holder for holder in live if pod_uid and holder.pod_uid == pod_uid] or live
    return max(mine, key=lambda holder: holder.since or "", default=None)


def adopt_daemon_flags(args: argparse.Namespace) -> Holder | None:
    """Take every recorded flag of the running daemon whose value here is still run's default; the daemon, or None."""
    daemon = running_daemon(args.state_dir, args.pod_uid)
    if daemon is None:
        return None
    defaults = _run_flag_defaults()
    for flag, text in daemon.flags.items():
        dest = flag.removeprefix("--").replace("-", "_")
        if dest not in defaults or dest == "state_dir" or getattr(args, dest) != defaults[dest][0]:
            continue  # given here: the doctor's own flag wins
        kind = defaults[dest][1]
        setattr(args, dest, kind(text) if callable(kind) else text)
    return daemon


def settings_from(args: argparse.Namespace) -> DoctorSettings:
    profile = None
    if args.profile:
        from dra_driver.backend.hardware_profiles import load_profile

        profile = load_profile(args.profile)
    simulated_root = None if args.simulated_root in (None, NO_SIMULATED_ROOT) else Path(args.simulated_root)
    return DoctorSettings(
        node_name=args.node_name, kubelet_dir=args.kubelet_dir, cdi_dir=args.cdi_dir, state_dir=args.state_dir,
        driver_root=args.driver_root, pod_resources_socket=args.pod_resources_socket or default_socket(args.kubelet_dir),
        dev_dir=args.dev_dir, containerd_config=args.containerd_config, crio_config=args.crio_config,
        vendors=[v.strip() for v in args.vendors.split(",") if v.strip()] if args.vendors else None,
        profile=profile, offer=Offer.parse(args.offer_devices), api_server=args.api_server, kubeconfig=args.kubeconfig,
        context=args.context, simulated_root=simulated_root, partitioning=args.partitioning,
        in_pod=bool(os.environ.get("KUBERNETES_SERVICE_HOST")),
    )  # fmt: skip


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    daemon = None if args.ignore_daemon else adopt_daemon_flags(args)
    try:
        report = run_checks(settings_from(args))
    except DraError as exc:
        print(f"dra-driver doctor: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.output in ("json", "yaml"):
        data = {**report.as_json(), "daemon": _daemon_json(daemon)}
        if args.output == "json":
            json.dump(data, out, indent=2)
            out.write("\n")
        else:
            import yaml

            yaml.safe_dump(data, out, sort_keys=False)
    else:
        write_text(report, args.node_name, out, daemon)
    return report.exit_code


def _daemon_json(daemon: Holder | None) -> dict[str, Any] | None:
    if daemon is None:
        return None
    return {"pid": daemon.pid, "host": daemon.host, "podUID": daemon.pod_uid, "since": daemon.since, "flags": daemon.flags}



def write_text(report: DoctorReport, node: str, out: TextIO, daemon: Holder | None = None) -> None:
    out.write(f"dra-driver doctor on node {node}\n")
    if daemon is not None:
        shown = " ".join(
            f"{flag}={value}" for flag, value in daemon.flags.items() if flag in ("--profile", "--simulated-root", "--partitioning", "--vendors")
        )
        out.write(f"  as the running daemon sees it ({daemon.describe()}{'; ' + shown if shown else ''}; flags given here win)\n")
    width = max(len(c.name) for c in report.checks)
    for check in report.checks:
        out.write(f"  {_LABEL[check.status]}  {check.name:<{width}}  {check.summary}\n")
        indent = " " * (width + 10)
        for detail in check.details:
            out.write(f"{indent}- {detail}\n")
        if check.fix and check.status is not Status.PASS:
            out.write(f"{indent}fix: {check.fix}\n")
    unseen = report.count(Status.UNSEEN)
    unseen_text = f"; {plural(unseen, 'check')} could not see what it reads" if unseen else ""
    if report.can_serve:
        out.write(f"The node can serve claims ({plural(report.count(Status.WARN), 'warning')}{unseen_text}).\n")
    else:
        out.write(f"The node cannot serve claims: {plural(report.count(Status.FAIL), 'check')} failed{unseen_text}.\n")
