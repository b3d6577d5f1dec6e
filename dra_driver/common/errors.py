"""Typed errors. Each carries the context a person needs to fix the input."""

from __future__ import annotations

from dataclasses import dataclass


class DraError(Exception):
    """Base of every error dra-driver raises on purpose."""


class UsageError(DraError):
    """Something a person gave (a flag, a file, a name) that cannot be used: exit code 2 on the command line.

    The bases of the input errors below; a command's own refusal of its input subclasses it too.
    """


@dataclass(frozen=True)
class FieldError:
    """One problem at one place: `path` names the object and field, `message` says what to do."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ValidationError(UsageError):
    """Input or output that breaks an API rule; lists every problem found, not just the first."""

    def __init__(self, errors: list[FieldError], subject: str = "") -> None:
        self.errors = list(errors)
        self.subject = subject
        head = f"{subject}: " if subject else ""
        if len(self.errors) == 1:
            text = f"{head}{self.errors[0]}"
        else:
            text = f"{head}{len(self.errors)} problems:\n" + "\n".join(f"  - {e}" for e in self.errors)
        super().__init__(text)


class BackendUnavailable(DraError):
    """A vendor backend cannot run here: library missing, no devices, wrong platform."""

    def __init__(self, vendor: str, reason: str) -> None:
        self.vendor = vendor
        self.reason = reason
        super().__init__(f"{vendor}: {reason}")


class DeviceError(DraError):
    """A single device could not be read or prepared; other devices are unaffected."""

    def __init__(self, device: str, reason: str) -> None:
        self.device = device
        self.reason = reason
        super().__init__(f"device {device}: {reason}")


class ConfigError(UsageError):
    """Opaque device configuration that does not validate; names the field and the fix."""


class ProfileError(UsageError):
    """A hardware profile that cannot be found or read."""
