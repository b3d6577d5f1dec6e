"""Wall time of each step of prepare/unprepare inside the daemon, for bench_prepare.py (not used in production).

Put this directory first on PYTHONPATH and name an output file; every Python process started that way
(the bench and the daemon it starts) wraps the steps below with a timer and appends a table of medians
to the file when it exits:

    PYTHONPATH=bench/phase_timers DRA_BENCH_PHASES_OUT=/tmp/phases.txt \\
        python bench/bench_prepare.py --profile dgx-h100 --claims 300 --concurrency 1 --devices 1 --repeat 3

The daemon's table holds the gRPC handlers and the steps under them; the bench's holds the simulated API
server's GET (its p90 and above are the publisher's long watch requests) and the kubelet-side call. The
first 10% of each step's calls (warm-up) are left out. Each
timer costs ~1 us, so the figures are slightly above an unprobed run's.
"""

from __future__ import annotations

import atexit
import functools
import os
import statistics
import threading
import time
from collections import defaultdict
from typing import Any

OUT = os.environ.get("DRA_BENCH_PHASES_OUT", "")
_times: dict[str, list[float]] = defaultdict(list)
_lock = threading.Lock()

# (module, attribute path, label), in the order a prepare runs them
STEPS = (
    ("dra_driver.node.plugin.kubelet_client", "PluginConnection.prepare", "kubelet side: NodePrepareResources call"),
    ("dra_driver.simulation.api_server", "_Handler.do_GET", "simulated API server: GET handler"),
    ("dra_driver.node.plugin.servicers", "DraServicer.NodePrepareResources", "daemon: NodePrepareResources handler"),
    ("dra_driver.node.plugin.prepare", "PrepareService._claim_lock", "  claim lock (in-process + lock file)"),
    ("dra_driver.node.plugin.prepare", "PrepareService._prepare_one", "  prepare of one claim"),
    ("dra_driver.kube.claims", "ClaimReader.get", "    claim GET (parsed)"),
    ("dra_driver.node.plugin.prepare", "PrepareService._our_devices", "    results and config checked"),
    ("dra_driver.node.plugin.prepare", "PrepareService._commit_started", "    PrepareStarted written"),
    ("dra_driver.node.plugin.prepare", "PrepareService._write_cdi", "    CDI spec and claim file"),
    ("dra_driver.node.cdi", "build_claim_spec", "      spec built"),
    ("dra_driver.node.cdi", "write_spec_atomic", "      spec encoded and written"),
    ("dra_driver.node.cdi", "write_claim_file", "      claim file written"),
    ("dra_driver.node.checkpoint", "Checkpoint.put", "    checkpoint record written (any put)"),
    ("dra_driver_nvidia.backend", "NvidiaBackend.prepare", "    NVIDIA backend prepare"),
    ("dra_driver_nvidia.backend", "NvidiaBackend._create_instances", "      dynamic MIG instances of the claim"),
    ("dra_driver_nvidia.mig", "create_instance_in", "        one MIG instance created (NVML)"),
    ("dra_driver_nvidia.ownership", "OwnershipJournal.record", "        MIG ownership journal write"),
    ("dra_driver.simulation.state", "SimulatedState.save", "        simulated hardware state saved (simulation only)"),
    ("dra_driver.node.plugin.servicers", "DraServicer.NodeUnprepareResources", "daemon: NodeUnprepareResources handler"),
    ("dra_driver.node.plugin.prepare", "PrepareService._unprepare_one", "  unprepare of one claim"),
    ("dra_driver_nvidia.backend", "NvidiaBackend.unprepare", "    NVIDIA backend unprepare"),
    ("dra_driver_nvidia.ownership", "OwnershipJournal.remove", "      MIG ownership journal removal"),
    ("dra_driver.node.cdi", "remove_spec", "    CDI spec or claim file removed (each)"),
    ("dra_driver.node.checkpoint", "Checkpoint.remove", "    checkpoint record removed"),
)


def _wrap(owner: Any, name: str, label: str) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            elapsed = time.perf_counter() - start
            with _lock:
                _times[label].append(elapsed)

    setattr(owner, name, timed)


def _install() -> None:
    import importlib

    for module_name, path, label in STEPS:
        owner: Any = importlib.import_module(module_name)
        *parents, name = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        _wrap(owner, name, label)


def _report() -> None:
    rows = []
    for _, _, label in STEPS:
        samples = _times.get(label, [])[len(_times.get(label, [])) // 10 :]
        if len(samples) >= 2:
            rows.append(
                f"{label:<46} {len(samples):>7} {statistics.median(samples) * 1000:>8.3f} {statistics.quantiles(samples, n=10)[-1] * 1000:>8.3f}"
            )
    if rows:
        with open(OUT, "a") as out:
            out.write(f"pid {os.getpid()}: {'step':<41} {'calls':>7} {'p50 ms':>8} {'p90 ms':>8}\n" + "\n".join(rows) + "\n\n")


if OUT:
    _install()
    atexit.register(_report)
