"""The examples the docs and `--help` texts show work: the files under examples/ and the doc command lines.

A claim, template or workload shown in docs/*.md or README.md is a file under examples/ (the doc block is
contained in it, so the two cannot drift), explained with the command its header names; device-plugin
workloads go through `migrate --check` and `migrate | explain`. Every `dra-driver ...` line of a doc code
block, and every example of `template --help`, is run here with the exit code (and the output lines) the
doc shows, or is listed in NOT_RUN with why it cannot run offline.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.cli import template as template_cli
from dra_driver.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CHECKED_BY = "# Checked by tests/examples/test_examples.py: dra-driver "
# Kinds whose YAML in a doc is an example a reader copies (fragments count when they name a device class).
EXAMPLE_KINDS = re.compile(r"^kind: (ResourceClaim|ResourceClaimTemplate|Pod|Deployment|StatefulSet|Job|DaemonSet)$", re.M)

# Doc command lines run here: the command as the doc writes it (comment dropped) -> its exit code.
RUN: dict[str, int] = {
    "dra-driver discover --profile dgx-h100 -o table": 0,
    "dra-driver discover --profile dgx-h100 --partitioning dynamic -o json": 0,
    "dra-driver template --count 4 --model H100 --fallback 4xA100 --same interconnect > claim.yaml": 0,
    "dra-driver explain claim.yaml --profile dgx-a100-mig --nodes 4": 0,  # claim.yaml: what the line above writes
    "dra-driver profiles": 0,
    "dra-driver explain examples/claims/mig-claim.yaml --profile dgx-a100-mig --nodes 49 --partitioning dynamic": 0,
    "dra-driver fleet --fleet examples/fleet/l4-held-and-tainted.yaml -o wide": 0,
    "dra-driver fleet --profile dgx-h100 --nodes 4 --partitioning dynamic -o svg > fleet.svg": 0,
    "dra-driver template --count 4 --model H100 --fallback 4xA100 --fallback count=2,mig=3g.40gb --same interconnect": 0,
    "dra-driver template --memory 300Gi": 2,
}
# Doc command lines not run, by a word they contain -> why.
NOT_RUN: dict[str, str] = {
    "--kubeconfig": "needs a cluster",
    "--context": "needs a cluster",
    "run": "the daemon: needs a kubelet (tests/cli/test_run.py runs it)",
    "doctor": "checks the machine it runs on (tests/node/checks)",
    "demo": "a synopsis with optional flags (tests of demo run it)",
    "discover -o yaml": "reads this machine's hardware",
    "[": "a synopsis, not a command",
    "FILE": "a synopsis, not a command",
    "...": "elided arguments",
    "*": "the reader's files (a shell glob)",
    "deployment.yaml": "the reader's file",
    "deploy.yaml": "the reader's file",
    "overlays/prod/": "the reader's kustomization",
    "manifests/": "the reader's directory",
    "slices.json": "the reader's file",
    "big-fleet.yaml": "the reader's file",
    "huge-chart.yaml": "the reader's file",
    "deep-claim.yaml": "the reader's file",
}


def _blocks(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line of the opening fence, the block's lines without their indentation) of each fenced code block."""
    lines = path.read_text().split("\n")
    index = 0
    while index < len(lines):
        if lines[index].lstrip().startswith("```"):
            indent = len(lines[index]) - len(lines[index].lstrip())
            end = next(j for j in range(index + 1, len(lines)) if lines[j].lstrip().startswith("```"))
            yield index + 1, [line[indent:] for line in lines[index + 1:end]]
            index = end + 1
        else:
            index += 1


def _doc_commands() -> list[tuple[str, str, list[str]]]:
    """(where, command, output lines shown after a `$ ` command) of every dra-driver line in a code block."""
    found = []
    for path in DOCS:
        for fence, block in _blocks(path):
            for offset, line in enumerate(block):
                text = line.strip()
                prompt = text.startswith("$ dra-driver ")
                if not (prompt or text.startswith("dra-driver ")) or text.split()[1].endswith(":"):
                    continue  # not a command line (`dra-driver run: serving ...` is output)
                command = re.split(r"\s{2,}#", text.removeprefix("$ "))[0].strip()
                output = block[offset + 1:] if prompt else []
                found.append((f"{path.relative_to(ROOT)}:{fence + offset + 1}", command, output))
    return found


def _help_commands() -> list[str]:
    return [line.strip() for line in (template_cli.__doc__ or "").splitlines() if line.startswith("    dra-driver ")]


def _not_run_reason(command: str) -> str | None:
    """Why `command` is not run: a NOT_RUN marker that is one of its words (a plain word) or part of it (the others)."""
    words = command.split()
    return next((why for marker, why in NOT_RUN.items() if marker in words or (not marker.isidentifier() and marker in command)), None)


def _run(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run a doc command line in process from the repository root; `> FILE` and claim.yaml go to tmp_path."""
    words, _, redirect = command.partition(" > ")
    argv = [str(tmp_path / w) if w == "claim.yaml" else w for w in shlex.split(words)[1:]]
    code = main(argv)
    out, err = capsys.readouterr()
    if redirect:
        (tmp_path / redirect.strip()).write_text(out)
    return code, out + err


def _shown_lines_in_order(shown: list[str], actual: str) -> list[str]:
    """The doc's output lines (elisions `...` skipped) missing from the actual output, or out of its order."""
    lines, missing, position = actual.split("\n"), [], 0
    for line in shown:
        if "..." in line or not line.strip():
            continue
        try:
            position = lines.index(line, position) + 1
        except ValueError:
            missing.append(line)
    return missing


def test_every_doc_command_is_run_or_says_why_not() -> None:
    commands = [command for _, command, _ in _doc_commands()] + _help_commands()
    unclassified = [c for c in commands if c not in RUN and c not in _help_commands() and _not_run_reason(c) is None]
    assert not unclassified, f"add these doc commands to RUN (with their exit code) or NOT_RUN: {unclassified}"
    stale = [c for c in RUN if c not in commands]
    assert not stale, f"RUN names commands no doc shows any more: {stale}"


@pytest.mark.parametrize("command", sorted(RUN))
def test_doc_command_exits_as_the_doc_says(command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)
    if "claim.yaml" in command and "> claim.yaml" not in command:  # README: template writes it, explain reads it
        writer = next(c for c in RUN if "> claim.yaml" in c)
        assert _run(writer, tmp_path, capsys)[0] == 0
    code, output = _run(command, tmp_path, capsys)
    assert code == RUN[command], output
    for where, shown_command, shown in _doc_commands():
        if shown_command == command and shown:
            assert not _shown_lines_in_order(shown, output), f"{where}: the doc's output differs from:\n{output}"


@pytest.mark.parametrize("command", _help_commands())
def test_template_help_examples_work_without_notes(
    command: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, output = _run(command, tmp_path, capsys)
    assert code == 0, output
    assert "fits no shipped hardware profile" not in output and "0 of" not in output, output


def test_readme_template_fallback_fits_a_shipped_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    writer = next(c for c in RUN if c.startswith("dra-driver template") and "> claim.yaml" in c)
    code, output = _run(writer, tmp_path, capsys)
    assert code == 0 and "fits no shipped hardware profile" not in output, output


def _examples(folder: str) -> list[Path]:
    return sorted((EXAMPLES / folder).glob("*.yaml"))


def _checked_by(path: Path) -> str:
    line = next((line for line in path.read_text().splitlines() if line.startswith(CHECKED_BY)), None)
    assert line is not None, f"{path}: name the command that checks it in a `{CHECKED_BY}...` line"
    return line.removeprefix(CHECKED_BY)


@pytest.mark.parametrize("path", _examples("claims"), ids=lambda p: p.name)
def test_claim_example_explains(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(path) if word == "FILE" else word for word in shlex.split(_checked_by(path))]
    assert argv[0] == "explain"
    code = main(argv)
    assert code == 0, capsys.readouterr()


@pytest.mark.parametrize("path", _examples("device-plugin"), ids=lambda p: p.name)
def test_device_plugin_example_migrates_and_explains(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = _checked_by(path).partition("| explain - ")[2].split()
    assert fleet, f"{path}: name the fleet it is explained on (`... | explain - --profile NAME`)"
    assert main(["migrate", "--check", str(path)]) == 1, capsys.readouterr()  # device-plugin requests it would convert
    capsys.readouterr()
    assert main(["migrate", str(path)]) == 0
    migrated = tmp_path / "migrated.yaml"
    migrated.write_text(capsys.readouterr().out)
    assert main(["migrate", "--check", str(migrated)]) == 0, capsys.readouterr()  # nothing left
    assert main(["explain", str(migrated), *fleet]) == 0, capsys.readouterr()


def _doc_examples() -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        for fence, block in _blocks(path):
            text = "\n".join(block)
            if text.startswith(("# Generated by dra-driver migrate", "$ dra-driver ")):
                continue  # a command's output: migrate's by tests/migrate/test_corpus.py, the others by RUN above
            if EXAMPLE_KINDS.search(text) or "deviceClassName:" in text:
                found.append((f"{path.relative_to(ROOT)}:{fence}", text))
    return found


@pytest.mark.parametrize(("where", "text"), _doc_examples(), ids=[w for w, _ in _doc_examples()])
def test_doc_example_is_an_example_file(where: str, text: str) -> None:
    files = [p for p in EXAMPLES.rglob("*.yaml") if text.strip() in p.read_text()]
    assert files, f"{where}: a claim or workload the doc shows is in no file under examples/ (copy it there, with its `{CHECKED_BY}` line)"
