"""`dra-driver doctor`: check this node (or the driver's pod) and explain what keeps it from serving claims.

Takes `run`'s flags (same names and defaults, so a DaemonSet's arguments can be copied) plus where the
container runtime's configuration is. Exit code: 0 the node can serve claims (warnings allowed), 1 it
cannot (at least one check failed), 2 bad flags or input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from dra_driver.cli.run import add_daemon_arguments
from dra_driver.common.errors import DraError
from dra_driver.node.checks import runtime_config
from dra_driver.node.checks.coexistence import Offer
from dra_driver.node.checks.doctor import DoctorReport, DoctorSettings, Status, run_checks
from dra_driver.node.checks.pod_resources import default_socket

EXIT_BAD_INPUT = 2
_LABEL = {Status.PASS: "PASS", Status.WARN: "WARN", Status.FAIL: "FAIL"}


def add_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "doctor",
        description="Checks the kubelet plugin directories and registration, the CDI directory and the container runtime's CDI "
        "configuration, the resource.k8s.io/v1 API, vendor libraries and device nodes, device plugins and same-name DRA drivers "
        "on the node, a running instance, and permissions. Exit code 0: the node can serve claims; 1: it cannot; 2: bad flags.",
    )
    add_daemon_arguments(parser)
    parser.add_argument("--dev-dir", type=Path, default=Path("/dev"), help="where the device nodes are (default /dev)")
    parser.add_argument("--containerd-config", type=Path, default=runtime_config.DEFAULT_CONTAINERD_CONFIG, help="containerd's config.toml (default %(default)s)")
    parser.add_argument("--crio-config", type=Path, default=runtime_config.DEFAULT_CRIO_CONFIG, help="CRI-O's crio.conf; <file>.d/*.conf is read too (default %(default)s)")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text", help="text for people, json for tools")
    parser.set_defaults(func=run)


def settings_from(args: argparse.Namespace) -> DoctorSettings:
    profile = None
    if args.profile:
        from dra_driver.backend.hardware_profiles import load_profile

        profile = load_profile(args.profile)
    return DoctorSettings(
        node_name=args.node_name, kubelet_dir=args.kubelet_dir, cdi_dir=args.cdi_dir, state_dir=args.state_dir,
        driver_root=args.driver_root, pod_resources_socket=args.pod_resources_socket or default_socket(args.kubelet_dir),
        dev_dir=args.dev_dir, containerd_config=args.containerd_config, crio_config=args.crio_config,
        vendors=[v.strip() for v in args.vendors.split(",") if v.strip()] if args.vendors else None,
        profile=profile, offer=Offer.parse(args.offer_devices), api_server=args.api_server, kubeconfig=args.kubeconfig,
    )  # fmt: skip


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        report = run_checks(settings_from(args))
    except DraError as exc:
        print(f"dra-driver doctor: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.output == "json":
        json.dump(report.as_json(), out, indent=2)
        out.write("\n")
    else:
        write_text(report, args.node_name, out)
    return report.exit_code


def write_text(report: DoctorReport, node: str, out: TextIO) -> None:
    out.write(f"dra-driver doctor on node {node}\n")
    width = max(len(c.name) for c in report.checks)
    for check in report.checks:
        out.write(f"  {_LABEL[check.status]}  {check.name:<{width}}  {check.summary}\n")
        indent = " " * (width + 10)
        for detail in check.details:
            out.write(f"{indent}- {detail}\n")
        if check.fix and check.status is not Status.PASS:
            out.write(f"{indent}fix: {check.fix}\n")
    failed = sum(c.status is Status.FAIL for c in report.checks)
    warned = sum(c.status is Status.WARN for c in report.checks)
    if report.can_serve:
        out.write(f"The node can serve claims ({warned} warning(s)).\n")
    else:
        out.write(f"The node cannot serve claims: {failed} check(s) failed.\n")
