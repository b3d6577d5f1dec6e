"""The DeviceClasses the migration may refer to: the ones shipped in deviceclasses/, or a directory given."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dra_driver
from dra_driver.inputs import read_objects

_CANDIDATES = (
    Path(dra_driver.__file__).resolve().parent.parent / "deviceclasses",
    Path(dra_driver.__file__).resolve().parent / "profiles" / "deviceclasses",
)


@dataclass
class ClassCatalog:
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> DeviceClass object

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.classes)

    def by_extended_resource(self, resource: str) -> dict[str, Any] | None:
        for obj in self.classes.values():
            if (obj.get("spec") or {}).get("extendedResourceName") == resource:
                return copy.deepcopy(obj)
        return None


def default_directory() -> Path | None:
    for candidate in _CANDIDATES:
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    return None


def load(directory: Path | None = None) -> ClassCatalog:
    """All DeviceClass objects in the *.yaml files of `directory` (default: the shipped ones)."""
    directory = directory or default_directory()
    catalog = ClassCatalog()
    if directory is None:
        return catalog
    for path in sorted(directory.glob("*.yaml")):
        for found in read_objects(path):  # the input layer: limits, envelope rules, one-line InputError
            obj = found.obj
            if obj.get("kind") == "DeviceClass":
                catalog.classes[str((obj.get("metadata") or {}).get("name", ""))] = obj
    return catalog
