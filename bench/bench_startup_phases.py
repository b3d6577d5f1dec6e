"""Where `dra-driver run` spends its start-up, phase by phase, until the first registration socket serves.

Runs the real `dra-driver run --profile P` in this process (no API server needed: nothing before
registration talks to it) and exits as soon as the first driver's registration server has started,
printing wall and CPU time at each phase. For a figure no other load on the machine can move, count
instructions instead:

    valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/bench_startup_phases.py

(the "Collected" line). Byte-compile the project first (`python -m compileall -q dra_driver vendors`)
as the image's pip install does, or every module is compiled from source on each start.

usage: python bench/bench_startup_phases.py [--profile P] [--partitioning static|dynamic]
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # before any other import: the imports are what is measured

import argparse  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import TYPE_CHECKING, Any  # noqa: E402
from node_layout import SIMULATED, node_dirs  # noqa: E402

if TYPE_CHECKING:
    from dra_driver.node.daemon import Daemon

MARKS: list[tuple[str, float, float]] = []


def mark(phase: str) -> None:
    MARKS.append((phase, time.perf_counter() - STARTED, time.process_time()))


def report_and_exit(cleanup: Callable[[], None]) -> None:
    print(f"{'phase':<28} {'wall ms':>8} {'cpu ms':>8}  (wall from this script's first line, cpu from process start)")
    for phase, wall, cpu in MARKS:
        print(f"{phase:<28} {wall * 1000:>8.1f} {cpu * 1000:>8.1f}")
    sys.stdout.flush()
    cleanup()  # os._exit runs no finally: remove the work dir and the simulated backends' scratch dirs here
    os._exit(0)  # the daemon is not meant to stop cleanly here: only the start-up is measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="dgx-h100")
    parser.add_argument("--partitioning", choices=("static", "dynamic"), default="static")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="dra-phases-", dir="/tmp")
    node_dirs(f"{work}/k", f"{work}/cdi")
    argv = [
        "run", "--profile", args.profile, *SIMULATED, "--partitioning", args.partitioning, "--node-name", "bench-node",
        "--api-server", "http://127.0.0.1:9", "--kubelet-dir", f"{work}/k", "--cdi-dir", f"{work}/cdi", "--state-dir", f"{work}/s",
    ]  # fmt: skip
    mark("interpreter + argparse")
    from dra_driver.cli import main as cli

    mark("dra_driver.cli.main imported")
    from dra_driver.cli import run

    mark("dra_driver.cli.run imported")
    from dra_driver.node.plugin import driver

    started = driver.DriverPlugin._start
    build_daemon = run.build_daemon
    daemons: list[Daemon] = []

    def built(*args: Any, **kwargs: Any) -> Daemon:
        daemons.append(build_daemon(*args, **kwargs))
        return daemons[-1]

    def cleanup() -> None:
        from dra_driver.backend.registry import OpenedBackends

        for daemon in daemons:
            OpenedBackends(daemon.backends).close()
        shutil.rmtree(work, ignore_errors=True)

    def registered(plugin: driver.DriverPlugin) -> None:
        mark("profile, backends, discovery")
        started(plugin)
        mark("first driver registered")
        report_and_exit(cleanup)

    driver.DriverPlugin._start = registered  # type: ignore[method-assign,assignment]
    run.build_daemon = built
    assert run  # imported above on purpose, as `dra-driver run` does before parsing
    cli.main(argv)


if __name__ == "__main__":
    main()
