"""Helpers shared by the explain tests: claim and fleet files, and running the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import alloc_builders as b
import pytest
import yaml

from dra_driver.cli.main import main

NV = b.NV


def write_yaml(path: Path, docs: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


def class_docs() -> list[dict[str, Any]]:
    return [b.class_doc(name, selectors) for name, selectors in b.CLASS_SELECTORS.items()]


def fleet_list(tmp_path: Path, slices: list[dict[str, Any]], extra: list[dict[str, Any]] | None = None) -> Path:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": slices + (extra or [])}))
    return path


def nodes(count: int = 2, per_node: int = 2) -> list[dict[str, Any]]:
    return [b.resource_slice(f"node-{n}", [b.device(f"gpu-{i}") for i in range(per_node)]) for n in range(count)]


def explain(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["explain", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def claim_file(tmp_path: Path, requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None, name: str = "claim.yaml") -> Path:
    return write_yaml(tmp_path / name, class_docs() + [b.claim_doc(requests, constraints)])
