"""DeviceClass objects (resource.k8s.io/v1, model/resource_v1.py's type): parsing, selector matching, the shipped set.

The shipped classes live in `deviceclasses/` at the repository root (one YAML per class,
listed by its kustomization.yaml). They are found, in order, at $DRA_DRIVER_DEVICECLASSES,
then next to the source tree (editable install or checkout).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError as PydanticError

from dra_driver.cel.device import CelDevice
from dra_driver.cel.errors import CelError, CelRuntimeError
from dra_driver.cel.selector import CompiledSelector, compile_selector
from dra_driver.common.errors import FieldError, ValidationError
from dra_driver.ingest import SourcedObject, read_documents, read_objects
from dra_driver.model.api_base import field_errors, validate_authored
from dra_driver.model.api_group import API_VERSION, GROUP
from dra_driver.model.resource_v1 import DeviceClass, DeviceClassSpec
from dra_driver.model.resource_v1_validation import class_spec_errors

ENV_DIR = "DRA_DRIVER_DEVICECLASSES"
API_VERSIONS = (API_VERSION, f"{GROUP}/v1beta1", f"{GROUP}/v1beta2")


@dataclass(frozen=True)
class ClassSelectors:
    """A parsed DeviceClass with its selectors, evaluated against devices."""

    device_class: DeviceClass

    @property
    def name(self) -> str:
        return self.device_class.name

    @property
    def spec(self) -> DeviceClassSpec:
        return self.device_class.spec

    @property
    def expressions(self) -> list[str]:
        return self.device_class.expressions

    def compiled(self) -> list[CompiledSelector]:
        """The compiled selectors (cached by expression text in compile_selector)."""
        return [compile_selector(e) for e in self.expressions]

    def matches(self, device: CelDevice) -> bool:
        """All selectors must be true, evaluated in order, stopping at the first false.

        A runtime error is raised (naming the class and selector), never read as "no match".
        """
        for index, selector in enumerate(self.compiled()):
            try:
                if not selector.evaluate(device):
                    return False
            except CelRuntimeError as exc:
                raise CelRuntimeError(exc.expression, f"class {self.name} selector #{index}: {exc.message}") from exc
        return True


def _compile_problem(expression: str) -> str | None:
    try:
        compile_selector(expression)
    except CelError as exc:
        return exc.message
    return None


def parse_device_class(obj: Mapping[str, Any], source: str = "", origin: SourcedObject | None = None) -> ClassSelectors:
    """Validate one DeviceClass object (a file a user wrote: unknown fields are errors, model/api_base.py),
    apply the API's rules and compile its selectors; ValidationError names every bad field, at its file line
    when `origin` says where the object was read."""
    name = str((obj.get("metadata") or {}).get("name", "DeviceClass"))
    what = f"DeviceClass {name}"
    subject = "" if origin else source or name  # with an origin, each error says where it is
    try:
        device_class = validate_authored(DeviceClass, obj)
    except PydanticError as exc:
        errors = field_errors(exc, "", origin.field_label(what)) if origin else _bare(field_errors(exc, ""))
        raise ValidationError(errors, subject) from exc
    label = origin.located(what) if origin else ""
    problems = []
    if obj.get("apiVersion") not in API_VERSIONS:
        problems.append(FieldError(f"{label}.apiVersion", f"{obj.get('apiVersion')!r} must be one of {', '.join(API_VERSIONS)}"))
    problems += class_spec_errors(device_class, label, _compile_problem)
    if not origin:
        problems = _bare(problems)
    if problems:
        raise ValidationError(problems, subject)
    return ClassSelectors(device_class)


def _bare(errors: list[FieldError]) -> list[FieldError]:
    """Paths from the object's root (`spec.selectors[0]`): the subject is named once, in front of them all."""
    return [FieldError(e.path.lstrip("."), e.message) for e in errors]


def load_file(path: Path) -> list[ClassSelectors]:
    """Every DeviceClass in a (multi-document) YAML file; other kinds are ignored."""
    found = read_objects(path)  # the input layer's limits and errors
    return [parse_device_class(item.obj, origin=item) for item in found if item.obj.get("kind") == "DeviceClass"]


def shipped_classes_dir() -> Path:
    """Where the shipped DeviceClass YAMLs are; ValidationError-free FileNotFoundError if absent."""
    candidates: list[Path] = []
    if os.environ.get(ENV_DIR):
        candidates.append(Path(os.environ[ENV_DIR]))
    candidates.append(Path(__file__).resolve().parents[2] / "deviceclasses")
    try:  # a regular (non-editable) install ships them as the data package dra_driver_deviceclasses
        import dra_driver_deviceclasses

        candidates.append(Path(dra_driver_deviceclasses.__file__).parent)
    except ImportError:
        pass
    for candidate in candidates:
        if (candidate / "kustomization.yaml").is_file():
            return candidate
    raise FileNotFoundError(
        f"shipped DeviceClasses not found (looked in {', '.join(map(str, candidates))}); set {ENV_DIR} to the deviceclasses/ directory"
    )


def load_device_classes(paths: Iterable[Path] | None = None) -> dict[str, ClassSelectors]:
    """DeviceClasses by name: from the given files/directories, or the shipped set."""
    files: list[Path] = []
    if paths is None:
        directory = shipped_classes_dir()
        listed = (read_documents(directory / "kustomization.yaml")[0].data or {}).get("resources", [])
        files = [directory / name for name in listed]
    else:
        for path in paths:
            files.extend(sorted(path.glob("*.yaml")) if path.is_dir() else [path])
    classes: dict[str, ClassSelectors] = {}
    for file in files:
        for device_class in load_file(file):
            if device_class.name in classes:
                raise ValidationError([FieldError("metadata.name", f"duplicate DeviceClass {device_class.name!r}")], str(file))
            classes[device_class.name] = device_class
    return classes
