"""Python's `$` also matches before a final newline: every full-value check must refuse "value\n"
(a newline smuggled into a label, a CEL selector built from a flag, or a path built from NVML's
driver version)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.template.intent import Problems, parse_want
from dra_driver.ingest.envelope import envelope_errors
from dra_driver_nvidia import driver_files


def _claim(labels: dict[str, str]) -> dict[str, object]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c", "labels": labels}}


@pytest.mark.parametrize("value", ["ok\n", "ok\n\n"])
def test_label_value_ending_in_newline_is_refused(value: str) -> None:
    assert envelope_errors(_claim({"team": "ok"})) == []
    assert any("labels" in str(error) for error in envelope_errors(_claim({"team": value})))


def test_kind_ending_in_newline_is_refused() -> None:
    obj = _claim({})
    obj["kind"] = "ResourceClaim\n"
    assert envelope_errors(obj)


@pytest.mark.parametrize(("key", "value"), [("model", "H100\n"), ("mig", "1g.10gb\n")])  # family is stripped: a newline there is harmless
def test_template_flags_ending_in_newline_are_refused(key: str, value: str) -> None:
    problems = Problems()
    parse_want({"vendor": "nvidia", key: value.rstrip("\n")}, "--want", problems)
    assert problems.errors == []
    parse_want({"vendor": "nvidia", key: value}, "--want", problems)
    assert any(key in error.path for error in problems.errors)


def test_driver_version_ending_in_newline_names_no_paths(tmp_path: Path) -> None:
    found = driver_files.discover(tmp_path, "550.54.15\n")
    assert (found.libraries, found.binaries, found.firmware, found.sockets) == ([], [], [], [])
