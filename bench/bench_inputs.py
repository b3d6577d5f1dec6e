"""Every command that reads files, on hostile inputs and on large valid ones: wall time and max RSS.

Usage:
    python bench/bench_inputs.py [--repeat 3] [--hostile-repeat 1] [--only NAME] [--baseline DIR] [--out DIR]

Each run is a real process (`python -m dra_driver.cli.main ...`), timed from start to
exit, with its peak resident memory from wait4(). Hostile cases come from
bench/hostile_inputs.py; the large valid inputs sit just under each default limit:
a 10,000-device JSON fleet, a YAML fleet near 250,000 values, manifests near
migrate's 1 MiB / 7,500 values, and a 30 MB profile. --baseline DIR runs the
same commands with PYTHONPATH=DIR (an exported older tree) to compare; those runs
are capped at 30 s and 2 GiB of address space so a runaway old run cannot hurt
the machine. Prints a Markdown table (median of --repeat runs).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from hostile_inputs import CASES, CLAIM, running_as_root

ROOT = Path(__file__).resolve().parents[1]
BASELINE_TIMEOUT_S = 30
BASELINE_MEMORY = 2 * 1024**3


def _fleet_file(directory: Path, name: str, profile: str, nodes: int, partitioning: str) -> Path:
    """A simulated fleet as a kubectl List, JSON or YAML by the name's suffix (written once)."""
    import yaml

    from dra_driver.sources import fleet as fleets

    path = directory / name
    if not path.exists():
        listed = {"apiVersion": "v1", "kind": "List", "items": fleets.simulated(profile, nodes, partitioning).slices}
        path.write_text(json.dumps(listed) if name.endswith(".json") else yaml.safe_dump(listed))
    return path


def _fleet_json(directory: Path) -> Path:
    return _fleet_file(directory, "fleet-10k.json", "dgx-a100-mig", 243, "dynamic")


def _fleet_yaml(directory: Path) -> Path:
    return _fleet_file(directory, "fleet-250-nodes.yaml", "dgx-h100", 250, "static")  # ~238,000 values


def _manifests(directory: Path) -> Path:
    path = directory / "manifests-85-jobs.yaml"
    if not path.exists():
        one = (ROOT / "tests/migrate/corpus/training-job.yaml").read_text()
        # ~6,900 values, under migrate's 7,500
        path.write_text("---\n".join(one.replace("name: ", f"name: n{index}-", 1) for index in range(85)))
    return path


def _big_profile(directory: Path) -> Path:
    path = directory / "profile-30mb-description.yaml"
    if not path.exists():
        base = (ROOT / "vendors/nvidia/profiles/t4.yaml").read_text()
        head, _, rest = base.partition("\ndescription:")
        path.write_text(head + f"\ndescription: '{'x' * 30_000_000}'\n" + rest.split("\n", 1)[1])
    return path


def _claim(directory: Path) -> Path:
    path = directory / "claim.yaml"
    path.write_text(CLAIM)
    return path


def _tiny_fleet(directory: Path) -> Path:
    path = directory / "tiny-fleet.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": []}))
    return path


COMMANDS: dict[str, Callable[[Path, Path, Path], list[str]]] = {
    "explain claim": lambda path, claim, fleet: ["explain", str(path), "--fleet", str(fleet)],
    "explain --fleet": lambda path, claim, fleet: ["explain", str(claim), "--fleet", str(path)],
    "migrate": lambda path, claim, fleet: ["migrate", str(path), "--report", "none"],
    "discover --profile": lambda path, claim, fleet: ["discover", "--profile", str(path), "-o", "json"],
}
LARGE: tuple[tuple[str, Callable[[Path], Path], tuple[str, ...]], ...] = (
    ("10k-device JSON fleet (13.8 MB)", _fleet_json, ("explain --fleet",)),
    ("YAML fleet, 250 nodes, ~238k values (2.9 MB)", _fleet_yaml, ("explain --fleet",)),
    ("85 training jobs, ~6,900 values (92 KB)", _manifests, ("migrate",)),
    ("30 MB profile (one long description)", _big_profile, ("discover --profile",)),
)


def run_once(argv: list[str], pythonpath: str | None) -> tuple[int, float, float]:
    """(exit code, wall seconds, max RSS MiB) of one real process.

    GNU time reports the peak RSS: Linux keeps ru_maxrss across execve, so wait4()
    on our own child would report this (input-writing) process's peak instead.
    """
    env = dict(os.environ)
    limits: Callable[[], None] | None = None
    if pythonpath:
        env["PYTHONPATH"] = pythonpath

        def limits() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (BASELINE_MEMORY, BASELINE_MEMORY))

    with tempfile.NamedTemporaryFile("r") as report:
        started = time.perf_counter()
        child = subprocess.Popen(
            ["/usr/bin/time", "-o", report.name, "-f", "%M", sys.executable, "-m", "dra_driver.cli.main", *argv],
            env=env, cwd=pythonpath or ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL, preexec_fn=limits, start_new_session=True,
        )
        try:
            code = child.wait(timeout=BASELINE_TIMEOUT_S if pythonpath else None)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)  # time and the command under it
            child.wait()
            code = -9
        wall = time.perf_counter() - started
        lines = [line for line in report.read().splitlines() if line.strip().isdigit()]
    return code, wall, int(lines[-1]) / 1024 if lines else float("nan")


def measure(argv: list[str], repeat: int, pythonpath: str | None) -> str:
    runs = [run_once(argv, pythonpath) for _ in range(repeat)]
    codes = sorted({code for code, _, _ in runs})
    if codes == [-9]:
        return f"killed after {BASELINE_TIMEOUT_S} s"
    wall = statistics.median(w for _, w, _ in runs)
    rss = statistics.median(r for _, _, r in runs)
    code = ",".join(str(c) for c in codes)
    return f"exit {code}, {wall:.2f} s, {rss:.0f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each large valid input (median)")
    parser.add_argument("--hostile-repeat", type=int, default=1, help="runs of each hostile input (median)")
    parser.add_argument("--only", help="run only cases whose name contains this")
    parser.add_argument("--baseline", help="an exported older tree to compare with (PYTHONPATH)")
    parser.add_argument("--out", type=Path, default=None, help="where inputs are written (default: a temp dir)")
    args = parser.parse_args()
    directory = args.out or Path(tempfile.mkdtemp(prefix="bench-inputs-"))
    directory.mkdir(parents=True, exist_ok=True)
    claim, fleet = _claim(directory), _tiny_fleet(directory)
    rows: list[tuple[str, str, list[str], int]] = []
    for case in CASES:
        if case.name == "unreadable" and running_as_root():
            continue
        rows += [(case.name, command, COMMANDS[command](case.make(directory), claim, fleet), args.hostile_repeat) for command in COMMANDS]
    for name, make, commands in LARGE:
        rows += [(name, command, COMMANDS[command](make(directory), claim, fleet), args.repeat) for command in commands]
    header = "| input | command | now |" + (" baseline |" if args.baseline else "")
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for name, command, argv, repeat in rows:
        if args.only and args.only not in name:
            continue
        now = measure(argv, repeat, None)
        before = f" {measure(argv, 1, args.baseline)} |" if args.baseline else ""
        print(f"| {name} | {command} | {now} |{before}", flush=True)


if __name__ == "__main__":
    main()
