"""Where the shared corpus of real manifests is (never copied into the project).

DRA_MIGRATE_CORPUS names it; otherwise the first `shared/migrate-corpus` found
walking up from the repository root. Tests skip with the reason when it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENV = "DRA_MIGRATE_CORPUS"


def corpus_root() -> Path | None:
    if os.environ.get(ENV):
        path = Path(os.environ[ENV])
        return path if path.is_dir() else None
    for parent in (REPO, *REPO.parents):
        candidate = parent / "shared" / "migrate-corpus"
        if (candidate / "corpus").is_dir():
            return candidate
    return None


ROOT = corpus_root()
SKIP_REASON = f"shared migrate corpus not found: set {ENV} or put it at <an ancestor of {REPO}>/shared/migrate-corpus"


def manifests() -> list[Path]:
    """Every manifest of corpus/ and corpus-derived/ (the workloads as people wrote them)."""
    if ROOT is None:
        return []
    return sorted(p for folder in ("corpus", "corpus-derived") for p in (ROOT / folder).iterdir() if p.is_file())


def require() -> Path:
    if ROOT is None:
        pytest.skip(SKIP_REASON)
    return ROOT
