"""CPU cost of the recovery evidence each prepare now writes: the claim file beside the CDI spec (the claim's
record, checksummed) and the spec's text in the PrepareCompleted record line (plus the UnprepareStarted line
each unprepare appends).

Measures CPU time (process_time, steadier than wall time on a shared machine) of building a claim's spec and
its PrepareCompleted line, and of writing the claim file (atomic, on a tmpfs), for claims of 1 and 8
NVIDIA-like devices, and of one extra record append.

usage: python bench/bench_evidence_cost.py [--iterations N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from dra_driver.node import cdi
from dra_driver.node.checkpoint import PREPARE_COMPLETED, UNPREPARE_STARTED, Checkpoint, CheckpointDevice, ClaimRecord
from dra_driver.node.plugin.recovery import claim_file_data
from dra_driver.backend.interface import ContainerEdits, DeviceNode

DRIVER = "gpu.nvidia.com"
UID = "0b4f3c2e-5d6a-4b7c-8d9e-0f1a2b3c4d5e"


def claim(devices: int) -> tuple[ClaimRecord, list[cdi.SpecDevice], ContainerEdits]:
    names = [f"gpu-{i}" for i in range(devices)]
    cdi_names = [cdi.cdi_device_name(UID, "node-a", n) for n in names]
    record = ClaimRecord(
        UID,
        "default",
        "claim",
        PREPARE_COMPLETED,
        [
            CheckpointDevice("gpu", "node-a", n, cdi_ids=[cdi.qualified_id(DRIVER, c), cdi.qualified_id(DRIVER, f"{UID}-request-gpu")])
            for n, c in zip(names, cdi_names)
        ],
        {"mig": []},
        cdi_spec=f"/var/run/cdi/k8s.{DRIVER}-device_{UID}.json",
    )
    spec_devices = [
        cdi.SpecDevice(c, n, ContainerEdits(device_nodes=[DeviceNode(f"/dev/nvidia{i}", type="c", major=195, minor=i)], env=[f"GPU_{i}=1"]))
        for i, (n, c) in enumerate(zip(names, cdi_names))
    ]
    claim_edits = ContainerEdits(device_nodes=[DeviceNode("/dev/nvidiactl"), DeviceNode("/dev/nvidia-uvm")], env=["NVIDIA_VISIBLE_DEVICES=void"])
    return record, spec_devices, claim_edits


def cpu_us(work, iterations: int) -> float:
    runs = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(iterations):
            work()
        runs.append((time.process_time() - start) / iterations * 1e6)
    return statistics.median(runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args()
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        boot = Path(tmp) / "boot_id"
        boot.write_text("boot-1\n")
        checkpoint = Checkpoint(Path(tmp) / "ckpt", boot)
        print(f"{'devices':>7} {'spec+line before us':>20} {'with evidence us':>17} {'line bytes before':>18} {'after':>6} {'claim file bytes':>17}")
        claim_file = Path(tmp) / ".claim"
        for devices in (1, 8):
            record, spec_devices, claim_edits = claim(devices)

            def before() -> bytes:
                cdi.build_claim_spec(DRIVER, spec_devices, claim_edits)
                return checkpoint._line(record)

            def after() -> bytes:
                text = cdi.json.dumps(cdi.build_claim_spec(DRIVER, spec_devices, claim_edits), separators=(",", ":"))
                completed = replace(record, spec_json=text)
                cdi.write_claim_file(claim_file, claim_file_data(checkpoint.boot_id, completed))
                return checkpoint._line(completed)

            line = after()
            size = claim_file.stat().st_size
            print(
                f"{devices:>7} {cpu_us(before, args.iterations):>20.1f} {cpu_us(after, args.iterations):>17.1f} {len(before()):>18} {len(line):>6} "
                f"{size:>17}"
            )
        marker = replace(claim(1)[0], phase=UNPREPARE_STARTED)
        checkpoint.put(claim(1)[0])
        print(
            f"one UnprepareStarted append on {shm}: {cpu_us(lambda: checkpoint._write_record(marker, durable=False), args.iterations // 4):.1f} us "
            "CPU"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
