"""What a migration did and did not do, and the errors that stop it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum

from dra_driver.common.errors import FieldError, UsageError


class Action(str, Enum):
    CONVERTED = "converted"  # a device-plugin request became a claim request
    TRANSLATED = "translated"  # a node label became a CEL selector and left the pod's placement
    GENERATED = "generated"  # a new object (ResourceClaimTemplate, DeviceClass) was emitted
    NOT_CONVERTED = "not-converted"  # left exactly as it was; `reason` says why
    NOTE = "note"  # converted, but the behaviour differs in a way the user should know


@dataclass(frozen=True)
class Location:
    """Where something is: file, document number (from 1, as the input layer counts), object and field path.

    `document` is None for what concerns a whole file (a Helm template source, a kustomization entry).
    """

    file: str
    document: int | None
    obj: str = ""
    path: str = ""

    def __str__(self) -> str:
        where = self.file if self.document is None else f"{self.file}: document {self.document}"
        if self.obj:
            where += f" ({self.obj})"
        if self.path:
            where += f" {self.path}"
        return where


@dataclass(frozen=True)
class Finding:
    action: Action
    where: Location
    subject: str  # the resource, label or object concerned
    reason: str
    remains: bool = False  # a device-plugin request left in the output (what `--check` fails on)

    def as_dict(self) -> dict[str, object]:
        data = asdict(self.where)
        return {"action": self.action.value, **data, "subject": self.subject, "reason": self.reason,
                "remains": self.remains}

    def __str__(self) -> str:
        # A whole-file finding's subject is the file itself: name it once (`FILE: reason`, docs/cli.md).
        repeats_file = self.where.document is None and self.subject == self.where.file
        subject = "" if repeats_file else f"{self.subject}: "
        return f"{self.action.value:<13} {self.where}: {subject}{self.reason}"


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    changed_files: list[str] = field(default_factory=list)

    def add(self, action: Action, where: Location, subject: str, reason: str, remains: bool = False) -> None:
        self.findings.append(Finding(action, where, subject, reason, remains))

    @property
    def remaining(self) -> list[Finding]:
        """Device-plugin requests the migration left as they were (time-sliced, unknown kinds, Helm sources...)."""
        return [f for f in self.findings if f.remains]

    def merge(self, other: Report) -> None:
        """Add another run's findings and changed files (several inputs migrated separately)."""
        self.findings.extend(other.findings)
        self.changed_files.extend(f for f in other.changed_files if f not in self.changed_files)

    def by_action(self, action: Action) -> list[Finding]:
        return [f for f in self.findings if f.action is action]

    def to_json(self) -> str:
        return json.dumps(
            {
                "changed": bool(self.changed_files),
                "changedFiles": self.changed_files,
                "summary": {**{a.value: len(self.by_action(a)) for a in Action}, "remaining": len(self.remaining)},
                "findings": [f.as_dict() for f in self.findings],
            },
            indent=2,
        )

    def to_text(self, written: bool = False) -> str:
        """The findings and a summary line; `written`: the changed files were rewritten (-w), not just shown."""
        return "\n".join([*(str(f) for f in self.findings), f"migrate: {self.summary(written)}"])

    def summary(self, written: bool = False) -> str:
        """The counts: what was done, files changed (or that would change), requests left."""
        counts = ", ".join(f"{len(self.by_action(a))} {a.value}" for a in Action)
        changed = f"{len(self.changed_files)} file(s) {'changed' if written else 'would change'}"
        return f"{counts}; {changed}; {len(self.remaining)} device-plugin request(s) left unconverted"


class MigrationError(UsageError):
    """Input the migration refuses; nothing is written when this is raised."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = list(errors)
        if len(errors) == 1:
            text = f"migrate refused: {errors[0]}"
        else:
            text = f"migrate refused ({len(errors)} problems):\n" + "\n".join(f"  - {e}" for e in errors)
        super().__init__(text)
