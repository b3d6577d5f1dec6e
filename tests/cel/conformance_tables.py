"""Kubernetes' own CEL test tables (shared/reference/cel-conformance), read in place, never copied.

Found through $DRA_CEL_CONFORMANCE, else by walking up from the repository root to a
`shared/reference/cel-conformance` beside it (CI checks the repo out next to shared/).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RELATIVE = Path("shared") / "reference" / "cel-conformance"


def tables_dir() -> Path | None:
    configured = os.environ.get("DRA_CEL_CONFORMANCE")
    if configured:
        return Path(configured) if (Path(configured) / "cases.py").is_file() else None
    for parent in (REPO, *REPO.parents):
        candidate = parent / RELATIVE
        if (candidate / "cases.py").is_file():
            return candidate
    return None


def load_cases(directory: Path) -> list[dict[str, Any]]:
    spec = importlib.util.spec_from_file_location("cel_conformance_cases", directory / "cases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.CASES)


def load_oracle(directory: Path) -> dict[tuple[str, str, bool], dict[str, Any]]:
    """What Go returned, by (case id, environment, DRAConsumableCapacity gate)."""
    entries = json.loads((directory / "oracle_go.json").read_text())
    return {(e["id"], e["env"], bool(e["gate"])): e for e in entries}


DIRECTORY = tables_dir()
CASES: list[dict[str, Any]] = load_cases(DIRECTORY) if DIRECTORY else []
ORACLE: dict[tuple[str, str, bool], dict[str, Any]] = load_oracle(DIRECTORY) if DIRECTORY else {}
SKIP_REASON = f"CEL conformance tables not found: set DRA_CEL_CONFORMANCE or check out the repo beside {RELATIVE}"
