"""Hardware profiles: data files describing what a real machine's libraries report.

A profile is YAML with a `name`, an optional `description`, and one section per
vendor (`nvidia`, `amd`, `gaudi`) whose content that vendor's simulator reads.
Profiles are found by name in the core directory (multi-vendor profiles) and in
each backend's profile_dir(), or given as a path to a user's own file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from dra_driver.common import suggest
from dra_driver.common.errors import ProfileError
from dra_driver.ingest import InputError, read_documents
from dra_driver.backend.registry import backend_classes, backend_profile_dirs, profile_dir_hints
from dra_driver.backend.interface import Profile

__all__ = ["CORE_PROFILE_DIR", "Profile", "available_profiles", "load_profile", "load_profile_file"]

CORE_PROFILE_DIR = Path(__file__).parent / "profiles"
_META_KEYS = {"name", "description"}


def _profile_dirs() -> list[Path]:
    return [CORE_PROFILE_DIR, *backend_profile_dirs()]


def _find_by_hint(name: str) -> Path | None:
    """A shipped profile `name` found by importing only the backend whose directory holds it (see load_profile)."""
    for vendor, directory in sorted(profile_dir_hints().items()):
        path = directory / f"{name}.yaml"
        if not path.is_file():
            continue
        cls = backend_classes((vendor,)).get(vendor)
        profile_dir = cls.profile_dir() if cls is not None else None
        if profile_dir is not None and Path(profile_dir).resolve() == directory.resolve():
            return path
    return None


def available_profiles(dirs: Iterable[Path] | None = None) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for directory in dirs if dirs is not None else _profile_dirs():
        for path in sorted(directory.glob("*.yaml")):
            found.setdefault(path.stem, path)
    return found


def load_profile_file(path: Path) -> Profile:
    """A profile file, read through the input layer (its limits; one-line InputError)."""
    try:
        documents = read_documents(path)
    except InputError as exc:
        raise ProfileError(f"profile {exc}") from exc
    if len(documents) > 1:
        raise ProfileError(f"profile {path} holds {len(documents)} YAML documents; a profile is one mapping")
    data = documents[0].data if documents else None
    if not isinstance(data, Mapping):
        raise ProfileError(f"profile {path} must be a YAML mapping with a name and vendor sections")
    sections = {key: value for key, value in data.items() if key not in _META_KEYS}
    bad = [key for key, value in sections.items() if not isinstance(value, Mapping)]
    if bad:
        raise ProfileError(f"profile {path}: sections {bad} must be mappings (vendor name -> simulator input)")
    if not sections:
        raise ProfileError(f"profile {path} describes no vendor; add a section such as 'nvidia:'")
    return Profile(
        name=str(data.get("name") or path.stem),
        description=str(data.get("description") or ""),
        sections=sections,
        source=path,
    )


def load_profile(name_or_path: str) -> Profile:
    """A shipped profile by name, or a user's profile file by path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml", ".json") or path.exists():
        return load_profile_file(path)  # the input layer says what is wrong with the path
    core = CORE_PROFILE_DIR / f"{name_or_path}.yaml"
    hinted = core if core.is_file() else _find_by_hint(name_or_path)  # most lookups: one backend imported, not all
    if hinted is not None:
        return load_profile_file(hinted)
    profiles = available_profiles()
    if name_or_path not in profiles:
        raise ProfileError(
            f"{suggest.unknown('profile', name_or_path, profiles)} (`dra-driver profiles` lists them), or give a path to a profile file"
        )
    return load_profile_file(profiles[name_or_path])
