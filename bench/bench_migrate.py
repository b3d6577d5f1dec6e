"""Time `migrate` over the shared corpus of real manifests, in process.

Usage: python bench/bench_migrate.py [--corpus DIR] [--repeat 5]
Each repetition migrates every file of corpus/ and corpus-derived/ one call per
file (what `migrate -w` does per file), then the whole set again with
splicing turned off (each changed document dumped whole), so the cost of
keeping unedited lines byte-identical (the splice and its re-parse check) shows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from unittest import mock

from dra_driver.migrate import MigrationError, Options, load_catalog, migrate
from dra_driver.migrate import stream as streams


def _default_corpus() -> Path:
    if os.environ.get("DRA_MIGRATE_CORPUS"):
        return Path(os.environ["DRA_MIGRATE_CORPUS"])
    here = Path(__file__).resolve().parent.parent
    for parent in (here, *here.parents):
        if (parent / "shared" / "migrate-corpus").is_dir():
            return parent / "shared" / "migrate-corpus"
    raise SystemExit("shared migrate corpus not found; pass --corpus")


def _run_all(inputs: list[tuple[str, str]], options: Options) -> tuple[float, int]:
    started = time.perf_counter()
    changed = 0
    for source, text in inputs:
        try:
            [result], _ = migrate([(source, text)], options)
        except MigrationError:
            continue
        changed += result.changed
    return time.perf_counter() - started, changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    corpus = args.corpus or _default_corpus()
    files = sorted(p for folder in ("corpus", "corpus-derived") for p in (corpus / folder).iterdir() if p.is_file())
    inputs = [(p.name, p.read_text()) for p in files]
    options = Options(catalog=load_catalog())
    spliced, dumped = [], []
    changed = 0
    for _ in range(args.repeat):
        seconds, changed = _run_all(inputs, options)
        spliced.append(seconds)
        with mock.patch.object(streams, "splice", lambda body, data, yaml: None):
            dumped.append(_run_all(inputs, options)[0])
    size = sum(len(text) for _, text in inputs)
    print(f"{len(files)} files ({size / 1024:.0f} KiB), {changed} changed, median of {args.repeat}:")
    print(f"  splice (default): {statistics.median(spliced) * 1000:.0f} ms total, "
          f"{statistics.median(spliced) * 1000 / len(files):.1f} ms per file")
    print(f"  whole-document dump: {statistics.median(dumped) * 1000:.0f} ms total")


if __name__ == "__main__":
    main()
