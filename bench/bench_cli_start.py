"""CPU time of `dra-driver` answers that need no command: `--help`, `--version`, `version` (median of N runs,
user + system CPU of the child process, a fresh interpreter each time).

    python bench/bench_cli_start.py [--repeat 10] [--main PATH]

`--main` runs another copy of cli/main.py (e.g. `git show main:dra_driver/cli/main.py > /tmp/main_before.py`) to compare.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys

ANSWERS = (["--help"], ["--version"], ["version"])


def cpu_of(command: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--main", default=None, help="a cli/main.py to run instead of `python -m dra_driver.cli.main`")
    args = parser.parse_args()
    entry = [sys.executable, args.main] if args.main else [sys.executable, "-m", "dra_driver.cli.main"]
    for answer in ANSWERS:
        samples = [cpu_of([*entry, *answer]) for _ in range(args.repeat)]
        print(
            f"dra-driver {' '.join(answer):<10} CPU median {statistics.median(samples) * 1000:6.0f} ms  (min {min(samples) * 1000:.0f} ms, "
            f"{args.repeat} runs)"
        )


if __name__ == "__main__":
    main()
