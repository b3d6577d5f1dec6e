"""The command: exit codes, outputs, refusals (no partial output), report formats."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from migrate_testlib import CORPUS, REFUSE, base_name, by_kind, cli as _run


def test_check_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = CORPUS / "training-job.yaml"
    code, out, _ = _run([str(source), "--check"], capsys)
    assert (code, out) == (1, "")
    migrated = tmp_path / "out.yaml"
    assert _run([str(source), "-o", str(migrated), "--report", "none"], capsys)[0] == 0
    assert _run([str(migrated), "--check"], capsys)[0] == 0
    assert _run([str(CORPUS / "unconvertible.yaml"), "--check"], capsys)[0] == 4  # requests remain, none convertible


def test_write_in_place_only_touches_changed_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    changed, unchanged = tmp_path / "job.yaml", tmp_path / "ops.yaml"
    shutil.copy(CORPUS / "training-job.yaml", changed)
    shutil.copy(CORPUS / "unconvertible.yaml", unchanged)
    before = unchanged.stat().st_mtime_ns
    code, out, _ = _run([str(changed), str(unchanged), "--write", "--report", "none"], capsys)
    assert (code, out) == (0, "")
    assert by_kind(changed.read_text(), "ResourceClaimTemplate")
    assert unchanged.stat().st_mtime_ns == before
    assert unchanged.read_text() == (CORPUS / "unconvertible.yaml").read_text()


def test_stdin_and_several_files_to_stdout(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO((CORPUS / "gaudi.yaml").read_text()))
    code, out, _ = _run(["-", str(CORPUS / "list.yaml"), "--report", "none"], capsys)
    assert code == 0
    assert {base_name(t["metadata"]["name"]) for t in by_kind(out, "ResourceClaimTemplate")} == {
        "gaudi-finetune-accelerators", "whisper-accelerators"}


def test_json_report_lists_converted_and_not_converted(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run([str(CORPUS / "reported.yaml"), "--report", "json"], capsys)
    report = json.loads(err)
    assert code == 0 and report["changed"] is True
    actions = [f["action"] for f in report["findings"]]
    assert actions.count("converted") == 1 and actions.count("not-converted") == 4
    first = report["findings"][0]
    assert {"file", "document", "obj", "path", "subject", "reason"} <= set(first)


@pytest.mark.parametrize("path", REFUSE, ids=lambda p: p.name)
def test_refusals_write_nothing_and_name_the_place(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run([str(path)], capsys)
    assert code == 2
    assert out == ""
    assert err.startswith("dra-driver migrate: error: ") and path.name in err and "document" in err


def test_refusal_in_one_file_blocks_all_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    shutil.copy(CORPUS / "gaudi.yaml", good)
    shutil.copy(CORPUS / "refuse" / "amd-gpu-and-partition.yaml", bad)
    code, _, err = _run([str(good), str(bad), "--write"], capsys)
    assert code == 2
    assert good.read_text() == (CORPUS / "gaudi.yaml").read_text()
    assert "amd.com/cpx_nps4" in err


def test_invalid_yaml_names_the_document_and_the_line_of_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    # The second document is broken at line 17 of the file (line 5 of that document).
    _, _, err = _run([str(CORPUS / "refuse" / "invalid-yaml.yaml")], capsys)
    assert "invalid-yaml.yaml:17: document 2: invalid YAML" in err and len(err.splitlines()) == 1


def test_write_refuses_stdin(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["-", "--write"], capsys)[0] == 2
