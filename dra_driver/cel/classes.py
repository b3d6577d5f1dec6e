"""DeviceClass objects (resource.k8s.io/v1): parsing, selector matching, the shipped set.

The shipped classes live in `deviceclasses/` at the repository root (one YAML per class,
listed by its kustomization.yaml). They are found, in order, at $DRA_DRIVER_DEVICECLASSES,
then next to the source tree (editable install or checkout).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError as PydanticError

from dra_driver.cel.device import CelDevice
from dra_driver.cel.errors import CelError, CelRuntimeError
from dra_driver.cel.selector import CompiledSelector, compile_selector
from dra_driver.common.errors import FieldError, ValidationError
from dra_driver.inputs import read_documents

ENV_DIR = "DRA_DRIVER_DEVICECLASSES"
MAX_SELECTORS = 32  # DeviceSelectorsMaxSize
MAX_CONFIGS = 32  # DeviceConfigMaxSize


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CelSelector(_Strict):
    expression: str


class DeviceSelector(_Strict):
    cel: CelSelector


class OpaqueConfig(_Strict):
    driver: str
    parameters: dict[str, Any]


class ClassConfig(_Strict):
    opaque: OpaqueConfig


class DeviceClassSpec(_Strict):
    selectors: list[DeviceSelector] = Field(default_factory=list, max_length=MAX_SELECTORS)
    config: list[ClassConfig] = Field(default_factory=list, max_length=MAX_CONFIGS)
    extendedResourceName: str | None = None


class Metadata(BaseModel):
    # Kubernetes metadata has many server-set fields; only the name matters here.
    model_config = ConfigDict(extra="allow", frozen=True)
    name: str


class DeviceClass(_Strict):
    apiVersion: Literal["resource.k8s.io/v1", "resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2"]
    kind: Literal["DeviceClass"]
    metadata: Metadata
    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def expressions(self) -> list[str]:
        return [s.cel.expression for s in self.spec.selectors]

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


def parse_device_class(obj: Mapping[str, Any], source: str = "") -> DeviceClass:
    """Validate one DeviceClass object and compile its selectors; ValidationError names the field."""
    subject = source or str((obj.get("metadata") or {}).get("name", "DeviceClass"))
    try:
        device_class = DeviceClass.model_validate(obj)
    except PydanticError as exc:
        errors = [FieldError(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()]
        raise ValidationError(errors, subject) from exc
    problems = []
    for index, expression in enumerate(device_class.expressions):
        try:
            compile_selector(expression)
        except CelError as exc:
            problems.append(FieldError(f"spec.selectors[{index}].cel.expression", exc.message))
    if problems:
        raise ValidationError(problems, subject)
    return device_class


def load_file(path: Path) -> list[DeviceClass]:
    """Every DeviceClass in a (multi-document) YAML file; other kinds are ignored."""
    documents = [d.data for d in read_documents(path) if d.data]  # the input layer's limits and errors
    return [parse_device_class(d, f"{path}") for d in documents if isinstance(d, dict) and d.get("kind") == "DeviceClass"]


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


def load_device_classes(paths: Iterable[Path] | None = None) -> dict[str, DeviceClass]:
    """DeviceClasses by name: from the given files/directories, or the shipped set."""
    files: list[Path] = []
    if paths is None:
        directory = shipped_classes_dir()
        listed = (read_documents(directory / "kustomization.yaml")[0].data or {}).get("resources", [])
        files = [directory / name for name in listed]
    else:
        for path in paths:
            files.extend(sorted(path.glob("*.yaml")) if path.is_dir() else [path])
    classes: dict[str, DeviceClass] = {}
    for file in files:
        for device_class in load_file(file):
            if device_class.name in classes:
                raise ValidationError([FieldError("metadata.name", f"duplicate DeviceClass {device_class.name!r}")], str(file))
            classes[device_class.name] = device_class
    return classes
