"""`dra-driver ready`: the readiness probe of the DaemonSet (exit 0 when ready, 1 with the reason when not).

It reads the status the daemon of the same pod writes (dra_driver.node.readiness) and needs no port, so a
surge pod with host networking is judged even while the old pod holds the metrics port; it trusts that status
only while a live daemon holds its lock and its monotonic heartbeat is fresh. Imports only what reading a small
JSON file and one non-blocking flock need: the kubelet runs it every few seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dra_driver.model.names import uid_problem
from dra_driver.node.readiness import MAX_AGE_S, read_status, status_path

POD_UID_ENV = "DRA_DRIVER_POD_UID"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ready",
        description="The DaemonSet's exec readinessProbe: reads the status the daemon of the same pod writes under --state-dir and "
        "exits 0 when it is registered with the kubelet, its DRA socket answers and its slices are published; 1 with the reason otherwise.",
    )
    # Required rather than defaulted: the default lives beside the socket code, whose gRPC import would cost every probe ~0.1 s CPU.
    parser.add_argument("--state-dir", type=Path, required=True, help="the daemon's --state-dir (deploy/: /var/run/dra-driver)")
    # run's variable (dra_driver.node.settings, not imported here for the same reason; tests/deploy/test_settings_table.py checks it).
    parser.add_argument("--pod-uid", default=os.environ.get(POD_UID_ENV) or None, help=f"the daemon's --pod-uid (default: ${POD_UID_ENV})")
    parser.add_argument("--max-age", type=float, default=MAX_AGE_S, help="oldest heartbeat accepted, in seconds (default: %(default)s)")
    parser.set_defaults(func=ready)


def ready(args: argparse.Namespace) -> int:
    problem = uid_problem(args.pod_uid) if args.pod_uid is not None else None
    if problem is not None:
        print(f"dra-driver ready: error: --pod-uid {problem}; pass the pod's metadata.uid ($POD_UID)", file=sys.stderr)
        return 2
    report = read_status(status_path(args.state_dir, args.pod_uid), args.max_age)
    print(report.summary(), file=sys.stdout if report.ready else sys.stderr)
    return 0 if report.ready else 1
