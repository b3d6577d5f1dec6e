"""What the readiness monitor's DRA-socket check costs (dra_driver/node/readiness.py, every 2 s), against a gRPC channel dial.

    python bench/bench_readiness_dial.py [--dials 30]

A grpc server on a unix socket in this process (the daemon's own kind); per check, the wall time and this process's CPU
(both ends), for the readiness check as it is (a plain socket: connect, HTTP/2 client preface, the server's SETTINGS
frame) and for what it did before (a gRPC channel per check, `channel_ready_future`, closed).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from dra_driver.node.readiness import _dials


def channel_dial(path: Path, timeout: float) -> bool:
    channel = grpc.insecure_channel(f"unix://{path}")
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        return True
    except grpc.FutureTimeoutError:
        return False
    finally:
        channel.close()


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(check: Callable[[Path, float], bool], path: Path, dials: int) -> tuple[float, float]:
    assert check(path, 1.0), "the server does not answer"
    cpu, wall = cpu_s(), time.perf_counter()
    for _ in range(dials):
        assert check(path, 1.0)
    return (time.perf_counter() - wall) / dials * 1000, (cpu_s() - cpu) / dials * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dials", type=int, default=30)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dial-"))
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    server.add_insecure_port(f"unix://{work / 'dra.sock'}")
    server.start()
    try:
        for name, check in (("readiness check (plain socket)", _dials), ("gRPC channel per check", channel_dial)):
            wall, cpu = measure(check, work / "dra.sock", args.dials)
            print(f"{name:<32} wall {wall:8.2f} ms   CPU {cpu:6.2f} ms per check")
    finally:
        server.stop(None)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
