"""What every rewriting step needs to know about the document it is in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dra_driver.common.errors import FieldError
from dra_driver.migrate.catalog import ClassCatalog
from dra_driver.migrate.report import Action, Location, Report


@dataclass
class Context:
    report: Report
    catalog: ClassCatalog
    errors: list[FieldError] = field(default_factory=list)
    file: str = "-"
    document: int = 0
    obj: str = ""
    root: Any = None  # the document's parsed data: aliases are shared across the whole document
    tolerations: bool = True  # add the tolerations ExtendedResourceToleration gave pods for converted resources

    def at(self, path: str = "") -> Location:
        return Location(self.file, self.document, self.obj, path)

    def add(self, action: Action, path: str, subject: str, reason: str) -> None:
        self.report.add(action, self.at(path), subject, reason)

    def leave(self, path: str, resource: str, reason: str) -> None:
        """A device-plugin request left exactly as it was (not-converted, and counted by `--check`)."""
        self.report.add(Action.NOT_CONVERTED, self.at(path), resource, reason, remains=True)

    def refuse(self, path: str, message: str) -> None:
        self.errors.append(FieldError(str(self.at(path)), message))
