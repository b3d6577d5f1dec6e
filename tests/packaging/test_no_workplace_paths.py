"""Shipped files cite public sources, never paths that exist only beside one checkout."""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".git", ".venv", "tests", "__pycache__", "build", "dist"}
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".proto", ".json", ".cfg", ".txt"}
# Reference notes that live outside the repository, and paths into them.
PRIVATE = re.compile(r"\.\./shared/|shared/reference|/work/|dra-api-facts|hardware\.md|anchors\.md|dependencies\.md|design\.md")


def _shipped_files() -> list[Path]:
    files = []
    for directory, subdirs, names in os.walk(ROOT):
        subdirs[:] = [d for d in subdirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in names:
            path = Path(directory, name)
            if path.suffix in SUFFIXES or name == "Dockerfile":
                files.append(path)
    return files


def test_no_shipped_file_points_at_private_notes() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _shipped_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if PRIVATE.search(line)
    ]
    assert not found, "cite the public source (docs/sources.md lists them) instead of:\n" + "\n".join(found)


def test_the_scan_sees_the_shipped_trees() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in _shipped_files()}
    assert {"README.md", "docs/sources.md", "vendors/nvidia/profiles/b200.yaml", "dra_driver/model/validation.py"} <= names
