#!/usr/bin/env python3
"""Compare the node's device readings with nvidia-smi on a real NVIDIA host (read-only: no GPU setting is changed).

    python scripts/metrics_check.py [--rounds 3] [--driver-root /]

Opens the NVIDIA backend on the host as `dra-driver run` does, asks it for its readings (the code behind
dra_driver_device_*), runs

    nvidia-smi --query-gpu=uuid,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu --format=csv,noheader,nounits

right after, and prints both side by side per GPU with the tolerance and the verdict. Utilization and power are
instantaneous and move between the two reads, so their tolerances are wider. Exit status 0 when every reading of
every round is within tolerance, 1 otherwise, 2 when either side cannot be read.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported in main(), after the arguments are read
    from dra_driver.backend.interface import VendorBackend

QUERY = "uuid,utilization.gpu,memory.used,memory.total,power.draw,temperature.gpu"
MIB = 2**20


@dataclass(frozen=True)
class Check:
    name: str
    unit: str
    tolerance: float  # absolute, in `unit`
    relative: float = 0.0  # or this fraction of nvidia-smi's value, whichever is larger


CHECKS = (
    Check("utilization", "%", 10.0),
    Check("memory.used", "MiB", 256.0, 0.02),
    Check("memory.total", "MiB", 1.0),
    Check("power.draw", "W", 15.0, 0.10),
    Check("temperature", "C", 2.0),
)


def smi(binary: str) -> dict[str, list[float | None]]:
    out = subprocess.run(
        [binary, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    rows: dict[str, list[float | None]] = {}
    for line in out.strip().splitlines():
        uuid, *values = (part.strip() for part in line.split(","))
        rows[uuid] = [_number(v) for v in values]
    return rows


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def ours(backend: VendorBackend) -> dict[str, list[float | None]]:
    rows: dict[str, list[float | None]] = {}
    for sample in backend.sample_devices():
        if sample.per_parent:  # a MIG device: compare the whole GPUs only
            continue
        rows[sample.uuid] = [
            sample.utilization * 100 if sample.utilization is not None else None,
            sample.memory_used_bytes / MIB if sample.memory_used_bytes is not None else None,
            sample.memory_total_bytes / MIB if sample.memory_total_bytes is not None else None,
            sample.power_watts,
            sample.temperature_celsius,
        ]
    return rows


def compare(mine: dict[str, list[float | None]], theirs: dict[str, list[float | None]]) -> bool:
    ok = True
    print(f"{'GPU':<42} {'reading':<13} {'dra-driver':>12} {'nvidia-smi':>12} {'tolerance':>10}  verdict")
    for uuid in sorted(theirs):
        if uuid not in mine:
            print(f"{uuid:<42} not among the driver's whole GPUs (MIG mode, or skipped at discovery)")
            continue
        for check, a, b in zip(CHECKS, mine[uuid], theirs[uuid], strict=True):
            if a is None or b is None:
                verdict = "n/a" if a is None and b is None else "MISSING"
                ok &= verdict == "n/a"
                print(f"{uuid:<42} {check.name:<13} {_show(a):>12} {_show(b):>12} {'':>10}  {verdict}")
                continue
            limit = max(check.tolerance, check.relative * abs(b))
            good = abs(a - b) <= limit
            ok &= good
            print(f"{uuid:<42} {check.name:<13} {a:>12.1f} {b:>12.1f} {limit:>8.1f}{check.unit:<2}  {'ok' if good else 'DIFFERS'}")
    return ok


def _show(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--driver-root", type=Path, default=Path("/"))
    args = parser.parse_args()
    binary = shutil.which("nvidia-smi")
    if binary is None:
        print("nvidia-smi not found on PATH", file=sys.stderr)
        return 2
    from dra_driver.backend.interface import BackendSettings
    from dra_driver_nvidia.backend import NvidiaBackend

    try:
        backend = NvidiaBackend.from_host(BackendSettings(driver_root=args.driver_root))
    except Exception as exc:
        print(f"cannot open NVML: {exc}", file=sys.stderr)
        return 2
    try:
        backend.discover()
        ok = True
        for round_number in range(1, args.rounds + 1):
            print(f"\nround {round_number}")
            mine = ours(backend)
            ok &= compare(mine, smi(binary))
            time.sleep(1.0)
        print("\nwithin tolerance" if ok else "\nsome readings differ beyond tolerance")
        return 0 if ok else 1
    finally:
        backend.close()


if __name__ == "__main__":
    sys.exit(main())
