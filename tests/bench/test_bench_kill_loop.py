"""bench/bench_kill_loop.py stays honest: a short run passes, and its checks catch each violation they name."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from dra_driver.node import cdi
from dra_driver.node.checkpoint import PREPARE_COMPLETED, CheckpointDevice, ClaimRecord
from dra_driver.node.plugin.recovery import claim_file_data
from dra_driver.backend.interface import ClaimRef, ContainerEdits

BENCH = Path(__file__).parents[2] / "bench" / "bench_kill_loop.py"


def bench_module() -> ModuleType:
    if str(BENCH.parent) not in sys.path:  # the bench imports its sibling node_layout
        sys.path.insert(0, str(BENCH.parent))
    spec = importlib.util.spec_from_file_location("bench_kill_loop", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_short_kill_loop_holds_every_invariant(empty_tmpdir: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--rounds", "2", "--seed", "7", "--concurrency", "4"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all invariants held" in done.stdout
    # Each restarted daemon reaped the simulated scratch dir of the one killed before it; the last one was stopped cleanly.
    assert not list(empty_tmpdir.glob("dra-*"))


def write_spec(cdi_dir: Path, uid: str, devices: list[str]) -> list[str]:
    names = [cdi.cdi_device_name(uid, "kill-node", d) for d in devices]
    ids = [cdi.qualified_id("gpu.nvidia.com", n) for n in names]
    record = ClaimRecord(uid, "kill", uid, PREPARE_COMPLETED, [CheckpointDevice("gpu", "kill-node", d, cdi_ids=[i]) for d, i in zip(devices, ids)])
    spec = cdi.build_claim_spec(
        "gpu.nvidia.com", [cdi.SpecDevice(n, d, ContainerEdits(env=["A=1"])) for n, d in zip(names, devices)], ContainerEdits()
    )
    cdi.write_spec_atomic(Path(cdi.spec_path(cdi_dir, "gpu.nvidia.com", uid)), spec)
    cdi.write_claim_file(Path(cdi.claim_file_path(cdi_dir, "gpu.nvidia.com", uid)), claim_file_data("b", record))
    return ids


@pytest.mark.parametrize(
    "violation", ["spec-of-free-claim", "device-in-two-specs", "prepared-without-spec", "answer-not-in-spec", "spec-without-claim-file"]
)
def test_check_node_catches(tmp_path: Path, violation: str) -> None:
    bench = bench_module()
    node = SimpleNamespace(cdi_dir=tmp_path)
    a = bench.Claim(ClaimRef("kill", "a", "uid-a"), ["gpu-0"])
    b = bench.Claim(ClaimRef("kill", "b", "uid-b"), ["gpu-1"])
    claims = {"uid-a": a, "uid-b": b}
    a.status, a.answered = "prepared", [("gpu-0", write_spec(tmp_path, "uid-a", ["gpu-0"]))]
    bench.check_node(node, claims)  # consistent so far
    if violation == "spec-of-free-claim":
        write_spec(tmp_path, "uid-b", ["gpu-1"])
    elif violation == "device-in-two-specs":
        b.status = "maybe"
        write_spec(tmp_path, "uid-b", ["gpu-0"])
    elif violation == "prepared-without-spec":
        Path(cdi.spec_path(tmp_path, "gpu.nvidia.com", "uid-a")).unlink()
    elif violation == "spec-without-claim-file":
        Path(cdi.claim_file_path(tmp_path, "gpu.nvidia.com", "uid-a")).unlink()
    else:
        a.answered = [("gpu-0", ["k8s.gpu.nvidia.com/device=uid-a-kill-node-gpu-7"])]
    with pytest.raises(bench.Violation):
        bench.check_node(node, claims)
