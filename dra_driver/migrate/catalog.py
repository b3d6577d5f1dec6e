"""The DeviceClasses the migration may refer to: the shipped ones, or a directory given.

The shipped set is found the way `explain` finds it (`shipped_classes_dir`): the
source tree's deviceclasses/, or the data package `dra_driver_deviceclasses` of an
installed copy. Not finding it is an error, never an empty catalog: without it MIG
resources would silently get the generic class and extended-resource output could
clobber a shipped class with a generated one of the same name.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_driver.cel.classes import shipped_classes_dir
from dra_driver.common.errors import FieldError
from dra_driver.ingest import read_objects
from dra_driver.migrate.report import MigrationError


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


def default_directory() -> Path:
    """The shipped deviceclasses/ directory; MigrationError (with the fix) when this install has none."""
    try:
        return shipped_classes_dir()
    except FileNotFoundError as exc:
        raise MigrationError([FieldError("--deviceclasses", f"{exc}; or pass --deviceclasses DIR")]) from exc


def load(directory: Path | None = None) -> ClassCatalog:
    """All DeviceClass objects in the *.yaml files of `directory` (default: the shipped ones)."""
    directory = directory or default_directory()
    catalog = ClassCatalog()
    for path in sorted(directory.glob("*.yaml")):
        for found in read_objects(path):  # the input layer: limits, envelope rules, one-line InputError
            obj = found.obj
            if obj.get("kind") == "DeviceClass":
                catalog.classes[str((obj.get("metadata") or {}).get("name", ""))] = obj
    return catalog
