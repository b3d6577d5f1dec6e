"""DeviceClasses as the tools read them (explain, template, fleet): the shipped ones, layered under the fleet's and
the user's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.sources import fleet as fleets
from dra_driver.allocator import CelMatcher, DeviceClassSpec
from dra_driver.model.resource_v1 import DeviceClass
from dra_driver.model.resource_v1_validation import class_spec_errors
from dra_driver.sources.claims import parse_object, to_class
from dra_driver.common.errors import FieldError
from dra_driver.ingest import SourcedObject
from dra_driver.ingest.errors import InputError


def shipped_class_documents() -> list[dict[str, Any]]:
    """The DeviceClasses shipped with dra-driver (deviceclasses/, listed by its kustomization.yaml).

    Read as plain documents so they go through the same checks as a user's classes.
    """
    from dra_driver.cel.classes import shipped_classes_dir

    try:
        directory = shipped_classes_dir()
    except FileNotFoundError:
        return []  # an installation without them: users bring classes with --classes
    listed = (fleets.read_documents(directory / "kustomization.yaml") or [{}])[0].get("resources") or []
    docs: list[dict[str, Any]] = []
    for name in listed:
        docs += fleets.read_documents(directory / str(name))
    return [d for d in docs if d.get("kind") == "DeviceClass"]


SHIPPED = "shipped"  # the source label of the shipped layer (explain/run.py)


@dataclass(frozen=True)
class ClassLayer:
    """DeviceClass documents from one source ("shipped", "fleet", "--classes", a file), and where a file holds
    each of them by name (none for the shipped set and a cluster's): errors name the field's file line."""

    source: str
    docs: Sequence[Mapping[str, Any]]
    origins: Mapping[str, SourcedObject] = field(default_factory=dict)


def merge_classes(layers: Sequence[ClassLayer], matcher: CelMatcher) -> dict[str, DeviceClassSpec]:
    """Merge class layers (later replaces earlier by name) and validate the result.

    The shipped classes' selectors are not compiled here: they are checked against the API
    server's rules by tests/deviceclasses/test_shipped_classes.py, and compiling the 32 of them
    in both CEL environments was ~50 ms of a one-second explain (docs/performance.md); a claim
    that uses one compiles it when it is matched."""
    merged: dict[str, tuple[ClassLayer, Mapping[str, Any]]] = {}
    for layer in layers:
        for doc in layer.docs:
            name = str((doc.get("metadata") or {}).get("name", ""))
            merged[name] = (layer, doc)
    out: dict[str, DeviceClassSpec] = {}
    errors: list[FieldError] = []
    for name, (layer, doc) in merged.items():
        what = f"DeviceClass {name}"
        origin = layer.origins.get(name)
        label = origin.located(what) if origin else f"{layer.source}: {what}"
        parsed = parse_object(doc, label, origin.field_label(what) if origin else None)
        if isinstance(parsed, list):
            errors += parsed
            continue
        assert isinstance(parsed, DeviceClass)
        errors += class_spec_errors(parsed, label, None if layer.source == SHIPPED else matcher.compile_problem)
        out[name] = to_class(parsed)
    if errors:
        raise InputError(errors)
    return out
