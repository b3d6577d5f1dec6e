"""`dra-driver profiles`: bounded table lines, the whole text with -o wide, data with -o json|yaml, one memory unit."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from dra_driver.cli.main import main
from dra_driver.cli.profiles import LINE_WIDTH, rows


def output(capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    assert main(["profiles", *flags]) == 0
    return capsys.readouterr().out


def test_table_lines_are_bounded_and_wide_shows_everything(capsys: pytest.CaptureFixture[str]) -> None:
    table, wide = output(capsys), output(capsys, "-o", "wide")
    assert max(len(line) for line in table.splitlines()) <= LINE_WIDTH
    assert max(len(line) for line in wide.splitlines()) > LINE_WIDTH  # some description is longer: wide keeps it whole
    found = rows()
    assert all(r["description"] in wide for r in found)
    assert len(table.splitlines()) == len(found) + 1


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_json_and_yaml_are_the_same_data(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = output(capsys, "-o", fmt)
    data = json.loads(text) if fmt == "json" else yaml.safe_load(text)
    assert data == rows()


def test_descriptions_give_memory_in_the_unit_discover_prints() -> None:
    """A description saying "262128 MB" beside discover's 262128Mi reads as two different sizes."""
    for row in rows():
        assert not re.search(r"\d+ ?(MB|MiB)\b", row["description"]), row
