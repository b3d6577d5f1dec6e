"""The `device` variable, built the way the Kubernetes scheduler builds it.

`device.driver` is the driver name; `device.attributes` and `device.capacity` are maps
domain -> (identifier -> value). A bare attribute name is filed under the driver's own
domain; `dom/name` under `dom`. An unknown domain reads as an empty map; an unknown
identifier inside a domain is a runtime error (a plain map lookup failure).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from celpy import celtypes

from dra_driver.cel.types import Quantity, Semver


class DomainMap(celtypes.MapType):
    """Outer attribute/capacity map: a missing domain is an empty map, not an error."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str) and not dict.__contains__(self, key):
            return celtypes.MapType()
        return super().__getitem__(key)


@dataclass(frozen=True)
class CelDevice:
    """One device converted once into CEL values; reused for every selector evaluated on it."""

    driver: str
    name: str
    value: celtypes.MapType  # the `device` variable
    # The same values by plain-str path ("driver"; ("attributes"|"capacity", domain, id)), for
    # compiled selectors' direct reads: plain str keys hash and compare in C.
    paths: Mapping[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def attribute(self, domain: str, name: str) -> Any:
        """The CEL value of one attribute, or None when absent (for grouping and explanations)."""
        return _lookup(self.value["attributes"], domain, name)

    def capacity(self, domain: str, name: str) -> Any:
        return _lookup(self.value["capacity"], domain, name)

    def has_domain(self, kind: str, domain: str) -> bool:
        """Whether any attribute (kind "attribute") or capacity of `domain` exists."""
        outer = self.value["attributes" if kind == "attribute" else "capacity"]
        return dict.__contains__(outer, domain)


def _lookup(outer: celtypes.MapType, domain: str, name: str) -> Any:
    inner = outer[domain]
    return dict.get(inner, name)


def _split(driver: str, key: str) -> tuple[str, str]:
    domain, sep, ident = key.rpartition("/")
    return (domain, ident) if sep else (driver, key)


def attribute_value(key: str, raw: Mapping[str, Any]) -> Any:
    """Convert one wire-format attribute ({"int": 4} / {"bool": ..} / {"string": ..} / {"version": ..})."""
    if not isinstance(raw, Mapping) or len(raw) != 1:
        raise ValueError(f"attribute {key!r}: expected exactly one of int/bool/string/version, got {raw!r}")
    (kind, value), = raw.items()
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return celtypes.IntType(value)
    if kind == "bool" and isinstance(value, bool):
        return celtypes.BoolType(value)
    if kind == "string" and isinstance(value, str):
        return celtypes.StringType(value)
    if kind == "version" and isinstance(value, str):
        try:
            return _parse_version(value)
        except ValueError as exc:
            raise ValueError(f"attribute {key!r}: {exc}") from exc
    raise ValueError(f"attribute {key!r}: unsupported value {raw!r}")


def cel_device(driver: str, device: Mapping[str, Any]) -> CelDevice:
    """Build the CEL `device` from a ResourceSlice `spec.devices[]` entry of `driver`.

    Raises ValueError naming the device and field when the entry is malformed.
    """
    name = str(device.get("name", ""))
    attributes: dict[str, dict[str, Any]] = {}
    capacity: dict[str, dict[str, Any]] = {}
    try:
        for key, raw in (device.get("attributes") or {}).items():
            domain, ident = _split(driver, key)
            attributes.setdefault(domain, {})[ident] = attribute_value(key, raw)
        for key, raw in (device.get("capacity") or {}).items():
            if not isinstance(raw, Mapping) or "value" not in raw:
                raise ValueError(f"capacity {key!r}: expected {{'value': <quantity>}}, got {raw!r}")
            domain, ident = _split(driver, key)
            try:
                capacity.setdefault(domain, {})[ident] = _parse_capacity(str(raw["value"]))
            except ValueError as exc:
                raise ValueError(f"capacity {key!r}: {exc}") from exc
    except ValueError as exc:
        raise ValueError(f"device {name!r} of driver {driver!r}: {exc}") from exc
    value = celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(driver),
            celtypes.StringType("attributes"): _domain_map(attributes),
            celtypes.StringType("capacity"): _domain_map(capacity),
            # Declared in the scheduler's environment whatever the gate; unset reads as false.
            celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(device.get("allowMultipleAllocations") is True),
        }
    )
    paths: dict[Any, Any] = {"driver": value["driver"], "allowMultipleAllocations": value["allowMultipleAllocations"]}
    for kind, by_domain in (("attributes", attributes), ("capacity", capacity)):
        for domain, values in by_domain.items():
            for ident, item in values.items():
                paths[(kind, domain, ident)] = item
    return CelDevice(driver=driver, name=name, value=value, paths=paths)


@lru_cache(maxsize=4096)
def _parse_version(text: str) -> Semver:
    """Fleets repeat the same few values; the values are immutable, so sharing them is safe."""
    return Semver.parse(text)


@lru_cache(maxsize=4096)
def _parse_capacity(text: str) -> Quantity:
    return Quantity.parse(text)


def _domain_map(by_domain: dict[str, dict[str, Any]]) -> DomainMap:
    return DomainMap(
        {
            celtypes.StringType(domain): celtypes.MapType({celtypes.StringType(k): v for k, v in values.items()})
            for domain, values in by_domain.items()
        }
    )
