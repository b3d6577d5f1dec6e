"""Find vendor backends through the `dra_driver.vendors` entry-point group and open them."""

from __future__ import annotations

import functools
import importlib.util
import logging
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path

from dra_driver.common.errors import BackendUnavailable
from dra_driver.common.logs import fields
from dra_driver.backend.interface import BackendSettings, Profile, VendorBackend

ENTRY_POINT_GROUP = "dra_driver.vendors"
log = logging.getLogger(__name__)


@functools.cache
def backend_classes(only: tuple[str, ...] | None = None) -> dict[str, type[VendorBackend]]:
    """Installed backend classes by vendor name; a broken plugin is logged and skipped (once).

    With `only`, just those vendors are imported: a backend module costs tens of milliseconds to
    import, and `run` on a single-vendor node (or with a profile) should not pay for the others.
    """
    found: dict[str, type[VendorBackend]] = {}
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if only is not None and entry.name not in only:
            continue
        try:
            cls = entry.load()
        except Exception as exc:  # a third-party plugin must not take the driver down
            log.warning("cannot load vendor backend", extra=fields(vendor=entry.name, error=str(exc)))
            continue
        if not (isinstance(cls, type) and issubclass(cls, VendorBackend)):
            log.warning("entry point is not a VendorBackend", extra=fields(vendor=entry.name, target=entry.value))
            continue
        found[entry.name] = cls
    return found


def backend_profile_dirs() -> list[Path]:
    """The profile directories installed backends ship (their profile_dir())."""
    dirs: list[Path] = []
    for cls in backend_classes().values():
        directory = cls.profile_dir()
        if directory is not None:
            dirs.append(Path(directory))
    return dirs


def profile_dir_hints() -> dict[str, Path]:
    """Vendor -> the `profiles` directory beside its backend's package, found without importing it.

    Only a hint for finding a profile by name (hardware_profiles confirms it with the backend's own
    profile_dir()); the shipped vendors keep their profiles there.
    """
    hints: dict[str, Path] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        spec = importlib.util.find_spec(entry.value.split(":", 1)[0].split(".", 1)[0])
        if spec is not None and spec.submodule_search_locations:
            hints[entry.name] = Path(list(spec.submodule_search_locations)[0]) / "profiles"
    return hints


@dataclass
class OpenedBackends:
    backends: list[VendorBackend] = field(default_factory=list)
    unavailable: list[BackendUnavailable] = field(default_factory=list)

    def close(self) -> None:
        for backend in self.backends:
            try:
                backend.close()
            except Exception as exc:  # closing is best effort
                log.warning("closing backend failed", extra=fields(vendor=backend.vendor, error=str(exc)))


def open_backends(
    settings: BackendSettings,
    profile: Profile | None = None,
    vendors: list[str] | None = None,
) -> OpenedBackends:
    """Open the requested vendors (all installed ones by default).

    With a profile, only the vendors it describes are simulated; without one,
    each backend probes the host and reports plainly why it cannot run.
    """
    if vendors:
        classes = backend_classes(tuple(sorted(set(vendors))))
    elif profile is not None:
        classes = backend_classes(tuple(sorted(profile.sections)))  # only the vendors it describes are simulated
    else:
        classes = backend_classes()
    wanted = vendors or sorted(classes)
    unknown = sorted(set(wanted) - set(classes))
    result = OpenedBackends()
    installed = ", ".join(sorted(backend_classes())) if unknown else ""  # every backend, for the message only
    for name in unknown:
        result.unavailable.append(BackendUnavailable(name, f"no backend named {name!r} is installed (installed: {installed or 'none'})"))
    try:
        for name in (n for n in wanted if n in classes):
            _open_one(name, classes[name], settings, profile, result)
    except BaseException:  # e.g. a bad profile section: the error is the caller's, the backends opened so far are ours to close
        result.close()
        raise
    return result


def _open_one(name: str, cls: type[VendorBackend], settings: BackendSettings, profile: Profile | None, into: OpenedBackends) -> None:
    try:
        if profile is not None:
            if name not in profile.sections:
                return
            backend = cls.from_profile(profile.sections[name], settings)
        else:
            backend = cls.from_host(settings)
    except BackendUnavailable as exc:
        into.unavailable.append(exc)
        return
    into.backends.append(backend)
