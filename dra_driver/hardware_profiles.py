"""Hardware profiles: data files describing what a real machine's libraries report.

A profile is YAML with a `name`, an optional `description`, and one section per
vendor (`nvidia`, `amd`, `gaudi`) whose content that vendor's simulator reads.
Profiles are found by name in the core directory (multi-vendor profiles) and in
each backend's profile_dir(), or given as a path to a user's own file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dra_driver.errors import ProfileError

CORE_PROFILE_DIR = Path(__file__).parent / "profiles"
# libyaml's loader when PyYAML has it (same safe constructors as safe_load, several times faster): a
# profile is read on every simulated start.
_YAML_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_META_KEYS = {"name", "description"}


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    sections: Mapping[str, Mapping[str, Any]]  # vendor -> simulator input
    source: Path


def _profile_dirs() -> list[Path]:
    from dra_driver.registry import backend_classes  # late: registry imports this module

    dirs = [CORE_PROFILE_DIR]
    for cls in backend_classes().values():
        directory = cls.profile_dir()
        if directory is not None:
            dirs.append(Path(directory))
    return dirs


def _find_by_hint(name: str) -> Path | None:
    """A shipped profile `name` found by importing only the backend whose directory holds it (see load_profile)."""
    from dra_driver.registry import backend_classes, profile_dir_hints

    for vendor, directory in sorted(profile_dir_hints().items()):
        path = directory / f"{name}.yaml"
        if not path.is_file():
            continue
        cls = backend_classes((vendor,)).get(vendor)
        if cls is not None and cls.profile_dir() is not None and Path(cls.profile_dir()).resolve() == directory.resolve():
            return path
    return None


def available_profiles(dirs: Iterable[Path] | None = None) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for directory in dirs if dirs is not None else _profile_dirs():
        for path in sorted(directory.glob("*.yaml")):
            found.setdefault(path.stem, path)
    return found


def load_profile_file(path: Path) -> Profile:
    try:
        data = yaml.load(path.read_text(), Loader=_YAML_LOADER)
    except OSError as exc:
        raise ProfileError(f"cannot read profile {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ProfileError(f"profile {path} is not valid YAML: {exc}") from exc
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
        if not path.is_file():
            raise ProfileError(f"profile file {path} does not exist")
        return load_profile_file(path)
    core = CORE_PROFILE_DIR / f"{name_or_path}.yaml"
    hinted = core if core.is_file() else _find_by_hint(name_or_path)  # most lookups: one backend imported, not all
    if hinted is not None:
        return load_profile_file(hinted)
    profiles = available_profiles()
    if name_or_path not in profiles:
        raise ProfileError(f"unknown profile {name_or_path!r}; choose one of: {', '.join(sorted(profiles)) or 'none installed'}, or give a path to a profile file")
    return load_profile_file(profiles[name_or_path])
