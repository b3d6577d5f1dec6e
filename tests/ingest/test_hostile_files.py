"""25-odd kinds of hostile files against every command that reads files: one line, exit 2, no traceback.

In process through the CLI's main (fast), plus real processes for what only a process
shows: a C-level crash (SIGSEGV), an endless standard input, the -vv traceback.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bench.hostile_inputs import CASES, Case, running_as_root
from input_commands import COMMANDS, Outcome, assert_refused, assert_survived, run_in_process, run_process, write_companions
from tests.unprivileged import as_nobody
from dra_driver.ingest import reader


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile")


_MADE: dict[tuple[Path, str], Path] = {}


def made(case: Case, workdir: Path) -> Path:
    """The case's input, written once per module (some are 20-50 MB)."""
    key = (workdir, case.name)
    if key not in _MADE:
        _MADE[key] = case.make(workdir)
    return _MADE[key]


@pytest.fixture(autouse=True)
def short_fifo_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "FIFO_WAIT_SECONDS", 0.05)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_command_survives(workdir: Path, case: Case, command: str) -> None:
    if case.name == "unreadable" and running_as_root():  # root reads any file: the command runs as nobody
        with open_to_all(case) as (path, claim, fleet):
            outcome = run_unprivileged(["--max-input-nodes", "50000", *COMMANDS[command](path, claim, fleet)])
        assert_refused(outcome, str(path))
        return
    path = made(case, workdir)
    claim, fleet = write_companions(workdir)
    # A lower value limit keeps "many-values" fast; the default is tested once below.
    outcome = run_in_process(["--max-input-nodes", "50000", *COMMANDS[command](path, claim, fleet)])
    if case.refused:
        assert_refused(outcome, str(path))
    else:
        assert_survived(outcome)


@contextmanager
def open_to_all(case: Case) -> Iterator[tuple[Path, Path, Path]]:
    """The case's file and the companions in a directory anyone may enter (pytest's are 0700), so that only the
    case's file is unreadable to an unprivileged user; removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="hostile-unreadable-"))
    try:
        directory.chmod(0o755)
        claim, fleet = write_companions(directory)
        yield case.make(directory), claim, fleet
    finally:
        shutil.rmtree(directory)


def run_unprivileged(argv: list[str], timeout_s: float = 60.0) -> Outcome:
    """run_in_process as nobody (tests/unprivileged.py). The command runs once as root first, so the child finds
    every module it needs already imported."""
    run_in_process(argv)

    def work() -> list[object]:
        outcome = run_in_process(argv)
        return [outcome.code, outcome.out, outcome.err]

    code, out, err = as_nobody(work, timeout_s)
    return Outcome(code, out, err)


def test_the_default_value_limit(workdir: Path) -> None:
    # An alias bomb reaches the default limit after a few lines (many-values would take seconds).
    path = next(c for c in CASES if c.name == "billion-laughs").make(workdir)
    claim, fleet = write_companions(workdir)
    outcome = run_in_process(COMMANDS["explain-fleet"](path, claim, fleet))
    assert_refused(outcome, f"{path}:6: document 1: holds more than 250,000 values")


def test_what_used_to_crash_a_process_ends_with_one_line(workdir: Path) -> None:
    deep = workdir / "deep-process.yaml"
    deep.write_bytes(b"[" * 50_000 + b"]" * 50_000)  # SIGSEGV (exit 139) in the C composer before
    claim, fleet = write_companions(workdir)
    assert_refused(run_process(["explain", str(deep), "--fleet", str(fleet)]), str(deep))
    deep_json = workdir / "deep-process.json"
    deep_json.write_bytes(b"[" * 50_000 + b"]" * 50_000)
    assert_refused(run_process(["explain", str(claim), "--fleet", str(deep_json)]), str(deep_json))


def test_endless_standard_input_stops_at_the_limit() -> None:
    with open("/dev/zero", "rb") as zero:
        outcome = run_process(["migrate", "-"], stdin=zero.fileno())
    assert_refused(outcome, "standard input")
    assert "larger than the input limit of 32 MiB" in outcome.err  # the ordinary limit: migrate parses only what matters


def test_the_limits_can_be_raised_with_global_flags(workdir: Path) -> None:
    many = workdir / "many-values.yaml"  # a GPU pod, so migrate parses it with its round-trip parser
    many.write_text("kind: Pod\napiVersion: v1\nmetadata:\n  name: p\n  annotations:\n"
                    + "".join(f"    k{i}: v\n" for i in range(3_751))
                    + "spec:\n  containers:\n  - name: c\n    image: i\n    resources:\n      limits:\n        nvidia.com/gpu: 1\n")
    refused = run_in_process(["migrate", str(many), "--report", "none"])
    assert_refused(refused, str(many))
    assert "--max-input-nodes" in refused.err and "comment-keeping parser" in refused.err
    raised = run_in_process(["--max-input-nodes", "30000", "migrate", str(many), "--report", "none"])
    assert raised.code == 0 and "kind: ResourceClaimTemplate" in raised.out
    small = run_in_process(["--max-input-size", "100", "migrate", str(many)])
    assert_refused(small, str(many))
    assert "input limit of 100 bytes" in small.err and "--max-input-size 400 ..." in small.err


def test_a_bad_flag_value_is_an_argument_error() -> None:
    outcome = run_in_process(["--max-input-size", "lots", "migrate", "x.yaml"])
    assert outcome.code == 2 and "--max-input-size" in outcome.err and "is not a size" in outcome.err


def test_internal_errors_are_one_line_and_a_traceback_only_with_vv(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dra_driver.cli.migrate as migrate_cli

    def broken(name: str) -> str:
        raise RuntimeError("simulated bug\nwith a second line")

    monkeypatch.setattr(migrate_cli, "read_checked", broken)
    quiet = run_in_process(["migrate", "x.yaml"])
    assert quiet.code == 1 and quiet.err.count("\n") == 1
    assert "internal error: RuntimeError: simulated bug with a second line (run with -vv" in quiet.err
    with pytest.raises(RuntimeError):
        run_in_process(["-vv", "migrate", "x.yaml"])


def test_input_errors_stay_one_line_even_with_vv_in_a_real_process(workdir: Path) -> None:
    # discover on a profile file whose vendor section the simulator cannot take is input, not a bug:
    # it stays one line even with -vv; -vv only adds the traceback of internal errors (tested above).
    bad = workdir / "profile.yaml"
    bad.write_text("name: x\nnvidia: {gpus: 3}\n")
    outcome = run_process(["-vv", "discover", "--profile", str(bad)], timeout=60)
    assert outcome.code == 2 and "Traceback" not in outcome.err


def test_a_named_pipe_with_a_writer_is_read(workdir: Path) -> None:
    fifo = workdir / "claim-pipe.yaml"
    if not fifo.exists():
        import os

        os.mkfifo(fifo)
    claim, fleet = write_companions(workdir)
    writer = subprocess.Popen(["sh", "-c", f"sleep 0.3; cat {claim} > {fifo}"])
    try:
        outcome = run_process(["explain", str(fifo), "--fleet", str(fleet)])
    finally:
        writer.wait(timeout=10)
    assert outcome.code == 0 and "ALLOCATABLE" in outcome.out


def test_a_hostile_kubeconfig_is_refused_before_the_kubernetes_client_reads_it(workdir: Path) -> None:
    claim, _ = write_companions(workdir)
    laughs = next(c for c in CASES if c.name == "billion-laughs").make(workdir)
    outcome = run_in_process(["explain", str(claim), "--kubeconfig", str(laughs)])
    assert_refused(outcome, f"kubeconfig {laughs}:6: document 1: holds more than 250,000 values")
    assert_refused(run_in_process(["explain", str(claim), "--kubeconfig", "/dev/zero"]), "kubeconfig /dev/zero: is larger than the input limit")
