"""ResourceSlices -> pools, the way the allocator sees them (structured/ pools_stable.go, docs/sources.md).

Per (driver, pool name) only the slices of the highest generation count; a
pool whose slice count differs from resourceSliceCount is incomplete; duplicate
device names or counter references to unknown counter sets make it invalid.
Slices are ordered by name and pools by (driver, name) so every run walks the
devices in the same order.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from decimal import Decimal
from functools import lru_cache
from typing import Any

from dra_driver.allocator.gcpause import collector_paused
from dra_driver.allocator.types import DeviceID, Node, NodeTarget, Pool, PoolDevice
from dra_driver.model import quantity


@lru_cache(maxsize=4096)
def _quantity(text: str) -> Decimal:
    """Counter values repeat across devices and nodes; parse each distinct string once."""
    return quantity.parse(text)


def qualify(key: str, driver: str) -> str:
    """A bare attribute/capacity name lives in the driver's own domain."""
    return key if "/" in key else f"{driver}/{key}"


_UNKNOWN = ("unknown", None)  # an attribute with no value member


def _target(obj: Mapping[str, Any]) -> NodeTarget:
    return NodeTarget(
        node_name=obj.get("nodeName") or None,
        all_nodes=bool(obj.get("allNodes")),
        node_selector=obj.get("nodeSelector") or None,
    )


@lru_cache(maxsize=4096)
def _consumption(set_name: str, counters: tuple[tuple[str, str], ...]) -> tuple[str, tuple[tuple[str, Decimal], ...]]:
    return set_name, tuple(sorted((name, _quantity(value)) for name, value in counters))


class QualifiedNames(dict[str, str]):
    """Published attribute/capacity key -> qualified name for one driver, filled on first use
    (the same few keys repeat on every device of a driver)."""

    def __init__(self, driver: str) -> None:
        super().__init__()
        self.driver = driver
        self.pairs = SharedPairs()

    def __missing__(self, key: str) -> str:
        value = self[key] = qualify(key, self.driver)
        return value


class SharedPairs(dict[tuple[str, Any], tuple[str, Any]]):
    """An attribute's ("int", 4) -> the first equal tuple made: a fleet repeats a few hundred values on every
    device (~1 M tuples, 68 MiB, for a 1,000-node mixed fleet, otherwise). Equal means ==, so a malformed
    ("int", True) would share ("int", 1): validation (model.validation) rejects such slices before any pool."""

    def __missing__(self, key: tuple[str, Any]) -> tuple[str, Any]:
        self[key] = key
        return key


_FIRST = operator.itemgetter(0)


def _attributes(raw: Mapping[str, Any], names: QualifiedNames) -> dict[str, tuple[str, Any]]:
    """{"int": 4} -> ("int", 4) for every attribute, keyed by qualified name.

    Built with map() over C functions: this runs for every attribute of every device of the
    fleet. An attribute that is not a one-member dict (never after validation) takes the slow path."""
    try:
        return dict(zip(map(names.__getitem__, raw), map(names.pairs.__getitem__, map(_FIRST, map(tuple, map(dict.items, raw.values()))))))
    except (TypeError, IndexError):
        return {names[key]: next(iter(value.items()), _UNKNOWN) if isinstance(value, Mapping) else _UNKNOWN for key, value in raw.items()}


def _device(raw: Mapping[str, Any], driver: str, pool: str, slice_name: str, per_device: bool, names: QualifiedNames) -> PoolDevice:
    attributes = _attributes(raw.get("attributes") or {}, names)
    capacity = {names[key]: str((value or {}).get("value")) for key, value in (raw.get("capacity") or {}).items()}
    consumed = raw.get("consumesCounters")
    consumes = (
        tuple(
            _consumption(
                str(entry.get("counterSet")),
                tuple((name, str((counter or {}).get("value", "0"))) for name, counter in (entry.get("counters") or {}).items()),
            )
            for entry in consumed
        )
        if consumed
        else ()
    )
    return PoolDevice(
        id=DeviceID(driver, pool, str(raw.get("name"))),
        wire=raw,
        slice_name=slice_name,
        attributes=attributes,
        capacity=capacity,
        consumes=consumes,
        taints=tuple(raw.get("taints") or ()),
        target=_target(raw) if per_device else None,
    )


def _slice_name(obj: Mapping[str, Any], index: int) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or f"slice-{index}")


def _check_counters(pool: Pool) -> str | None:
    for device in pool.devices:
        for set_name, counters in device.consumes:
            known = pool.counter_sets.get(set_name)
            if known is None:
                return f"device {device.id.device} consumes from unknown counter set {set_name!r}"
            for counter, _amount in counters:
                if counter not in known:
                    return f"device {device.id.device} consumes unknown counter {counter!r} of counter set {set_name!r}"
    return None


def build_pools(slices: Iterable[Mapping[str, Any]]) -> list[Pool]:
    """Group ResourceSlice objects into pools, keeping only each pool's newest generation."""
    with collector_paused():  # ~10 objects per device, all kept, none cyclic
        return _build_pools(slices)


def _build_pools(slices: Iterable[Mapping[str, Any]]) -> list[Pool]:
    names_by_driver: dict[str, QualifiedNames] = {}
    grouped: dict[tuple[str, str], list[tuple[str, Mapping[str, Any]]]] = {}
    for index, obj in enumerate(slices):
        spec = obj.get("spec") or {}
        key = (str(spec.get("driver")), str((spec.get("pool") or {}).get("name")))
        grouped.setdefault(key, []).append((_slice_name(obj, index), spec))
    pools: list[Pool] = []
    for (driver, pool_name), members in sorted(grouped.items()):
        newest = max(int(spec["pool"].get("generation") or 0) for _, spec in members)
        current = sorted(((name, spec) for name, spec in members if int(spec["pool"].get("generation") or 0) == newest), key=lambda item: item[0])
        pool = Pool(
            driver=driver,
            name=pool_name,
            generation=newest,
            slice_count=int(current[0][1]["pool"].get("resourceSliceCount") or 1),
            stale_slices=len(members) - len(current),
        )
        seen: dict[str, str] = {}
        names = names_by_driver.get(driver) or names_by_driver.setdefault(driver, QualifiedNames(driver))
        for slice_name, spec in current:
            pool.slices.append(slice_name)
            per_device = bool(spec.get("perDeviceNodeSelection"))
            pool.slice_targets[slice_name] = _target(spec)
            for counter_set in spec.get("sharedCounters") or []:
                name = str(counter_set.get("name"))
                if name in pool.counter_sets and pool.invalid is None:
                    pool.invalid = f"counter set {name!r} is defined twice"
                pool.counter_sets[name] = {c: _quantity(str(v.get("value", "0"))) for c, v in (counter_set.get("counters") or {}).items()}
            for raw in spec.get("devices") or []:
                device = _device(raw, driver, pool_name, slice_name, per_device, names)
                if device.id.device in seen and pool.invalid is None:
                    pool.invalid = f"device name {device.id.device!r} appears twice (slices {seen[device.id.device]} and {slice_name})"
                seen.setdefault(device.id.device, slice_name)
                pool.devices.append(device)
        if pool.invalid is None:
            pool.invalid = _check_counters(pool)
        pools.append(pool)
    return pools


# -- node selection ---------------------------------------------------------------------------


def _requirement_matches(requirement: Mapping[str, Any], value: str | None) -> bool:
    operator = requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and values:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def node_selector_matches(selector: Mapping[str, Any], node: Node) -> bool:
    """core/v1 NodeSelector: terms are ORed, requirements inside a term ANDed."""
    for term in selector.get("nodeSelectorTerms") or []:
        fields_ok = all(_requirement_matches(r, node.name if r.get("key") == "metadata.name" else None) for r in term.get("matchFields") or [])
        labels_ok = all(_requirement_matches(r, node.labels.get(str(r.get("key")))) for r in term.get("matchExpressions") or [])
        if fields_ok and labels_ok and (term.get("matchFields") or term.get("matchExpressions")):
            return True
    return False


def target_matches(target: NodeTarget, node: Node) -> bool:
    if target.all_nodes:
        return True
    if target.node_name is not None:
        return target.node_name == node.name
    if target.node_selector is not None:
        return node_selector_matches(target.node_selector, node)
    return False


def node_names(pools: Iterable[Pool]) -> list[str]:
    """Every node a slice or device names, sorted (the order nodes are tried in)."""
    names: set[str] = set()
    for pool in pools:
        targets = list(pool.slice_targets.values()) + [d.target for d in pool.devices if d.target is not None]
        for target in targets:
            if target.node_name:
                names.add(target.node_name)
            for term in (target.node_selector or {}).get("nodeSelectorTerms") or []:
                for requirement in term.get("matchFields") or []:
                    if requirement.get("key") == "metadata.name" and requirement.get("operator") == "In":
                        names.update(str(v) for v in requirement.get("values") or [])
    return sorted(names)


def device_node_target(pool: Pool, device: PoolDevice) -> NodeTarget:
    return device.target if device.target is not None else pool.slice_targets[device.slice_name]
