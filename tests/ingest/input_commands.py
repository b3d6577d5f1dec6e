"""Running each command that reads files on one input, in process (CLI main) or as a real process."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from bench.hostile_inputs import CLAIM
from dra_driver.cli.main import main

# A fleet of one node with two GPUs, the smallest input that lets a claim be explained.
FLEET = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [{
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-0-gpu"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "node-0",
            "pool": {"name": "node-0", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}}} for i in range(2)],
        },
    }],
}


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


def write_companions(directory: Path) -> tuple[Path, Path]:
    """A valid claim and fleet, for the commands' other argument."""
    claim, fleet = directory / "good-claim.yaml", directory / "good-fleet.json"
    claim.write_text(CLAIM)
    fleet.write_text(json.dumps(FLEET))
    return claim, fleet


# name -> argv builder (input path, valid claim, valid fleet)
COMMANDS: dict[str, Callable[[Path, Path, Path], list[str]]] = {
    "explain-claim": lambda path, claim, fleet: ["explain", str(path), "--fleet", str(fleet)],
    "explain-fleet": lambda path, claim, fleet: ["explain", str(claim), "--fleet", str(path)],
    "migrate": lambda path, claim, fleet: ["migrate", str(path), "--report", "none"],
    "discover-profile": lambda path, claim, fleet: ["discover", "--profile", str(path), "-o", "json"],
    "fleet-fleet": lambda path, claim, fleet: ["fleet", "--fleet", str(path), "-o", "json"],
}


def run_in_process(argv: list[str]) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = int(exc.code or 0)
    return Outcome(code, out.getvalue(), err.getvalue())


def run_process(argv: list[str], stdin: int | None = None, timeout: float = 60) -> Outcome:
    done = subprocess.run(
        [sys.executable, "-m", "dra_driver.cli.main", *argv],
        stdin=stdin if stdin is not None else subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


def assert_survived(outcome: Outcome) -> None:
    """No traceback, no internal error, an exit code the command documents."""
    assert outcome.code in (0, 1, 2), outcome
    assert "Traceback" not in outcome.err and "internal error" not in outcome.err, outcome.err[-2000:]


def assert_refused(outcome: Outcome, name: str) -> None:
    assert_survived(outcome)
    lines = outcome.err.strip().splitlines()
    assert outcome.code == 2 and len(lines) == 1 and name in lines[0], outcome.err[-2000:]
