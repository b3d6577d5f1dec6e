"""Evaluating device selectors, with memoized verdicts.

The allocator talks to a `Matcher`: `evaluate(expression, device)` returns the
selector's bool or raises SelectorRuntimeError. `CelMatcher` is the real one,
on top of dra_driver.cel. Devices that agree on every attribute/capacity an
expression reads (CompiledSelector.referenced_keys) get the same answer, so the
verdict is cached per distinct tuple of those values: on a fleet of thousands of
identical GPUs an expression runs once per distinct model, not once per device.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from dra_driver.allocator.types import PoolDevice

class SelectorRuntimeError(Exception):
    """The expression failed on this device (scheduler semantics: the claim cannot be allocated)."""


# A value a selector reads: ("driver", None, ""), ("attribute"|"capacity", domain or None, name).
# domain None means the device's own driver domain (`device.attributes[device.driver]`).
Key = tuple[str, "str | None", str]


class Matcher(Protocol):
    def evaluate(self, expression: str, device: PoolDevice) -> bool: ...

    def keys_read(self, expression: str) -> tuple[Key, ...] | None: ...

    def describe_reads(self, expression: str, device: PoolDevice) -> str: ...


def key_value(device: PoolDevice, key: Key) -> Any:
    """What `device` holds for `key`: an attribute (type, value), a capacity string, or None."""
    kind, domain, name = key
    if kind == "driver":
        return device.id.driver
    qualified = f"{domain or device.id.driver}/{name}"
    return device.attributes.get(qualified) if kind == "attribute" else device.capacity.get(qualified)


def read_values(device: PoolDevice, keys: Iterable[Key]) -> list[str]:
    """`name=value` for each key the expression reads (for explanations: what it saw)."""
    shown: list[str] = []
    for key in keys:
        kind, domain, name = key
        label = "driver" if kind == "driver" else f"{domain or device.id.driver}/{name}"
        value = key_value(device, key)
        if value is None:
            shown.append(f"{label} unset")
        elif isinstance(value, tuple):
            shown.append(f"{label}={value[1]!r}" if value[0] == "string" else f"{label}={value[1]}")
        else:
            shown.append(f"{label}={value}")
    return shown


def _accessors(keys: Iterable[Key], driver: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The qualified attribute and capacity names `keys` read on devices of `driver` (what key_value
    looks up); the driver itself is part of every memo key already."""
    attributes = tuple(f"{domain or driver}/{name}" for kind, domain, name in keys if kind == "attribute")
    capacity = tuple(f"{domain or driver}/{name}" for kind, domain, name in keys if kind == "capacity")
    return attributes, capacity


def _normalise_key(key: Any) -> Key:
    return (str(key.kind), key.domain, str(key.name))


class CelMatcher:
    """The real CEL evaluator, memoized per distinct value tuple of the keys an expression reads.

    Two Kubernetes environments (cel/environment.py): input is validated as the API server
    validates a new selector (NewExpressions, the DRAConsumableCapacity gate as given, the
    compile-time cost limit); devices are matched as kube-scheduler matches them
    (StoredExpressions)."""

    def __init__(self, consumable_capacity: bool = False) -> None:
        from dra_driver import cel  # late: keeps the allocator importable without the CEL layer

        self._cel = cel
        self.validation = cel.api_server(consumable_capacity)
        self.scheduling = cel.SCHEDULER
        self._compiled: dict[str, Any] = {}
        self._keys: dict[str, tuple[Key, ...] | None] = {}
        self._memo: dict[tuple[str, Any], bool | str] = {}
        self._access: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...]]] = {}
        self._last: tuple[Any, str, Any] = (None, "", None)
        self._shown: dict[tuple[str, Any], str] = {}
        self._cel_devices: dict[int, Any] = {}
        self.evaluations = 0  # real CEL runs (for the benchmark)

    def compile_problem(self, expression: str) -> str | None:
        """None when the API server would accept `expression` in a new object, else why not."""
        try:
            selector = self._cel.compile_selector(expression, environment=self.validation)
            self._program(expression)
        except self._cel.CelCompileError as exc:
            return getattr(exc, "message", str(exc))
        return selector.cost_problem()

    def _program(self, expression: str) -> Any:
        program = self._compiled.get(expression)
        if program is None:
            program = self._cel.compile_selector(expression)
            self._compiled[expression] = program
            keys = getattr(program, "referenced_keys", None)
            self._keys[expression] = None if keys is None else tuple(sorted((_normalise_key(k) for k in keys), key=repr))
        return program

    def keys_read(self, expression: str) -> tuple[Key, ...] | None:
        self._program(expression)
        return self._keys[expression]

    def _memo_key(self, expression: str, device: PoolDevice) -> Any:
        keys = self._keys[expression]
        if keys is None:
            return id(device)  # unknown reads: no sharing between devices
        last = self._last
        if last[0] is device and last[1] == expression:
            return last[2]  # describe_reads right after evaluate: same device, same key
        driver = device.id.driver
        access = self._access.get((expression, driver))
        if access is None:  # qualified names once per expression and driver, not per device
            access = self._access[(expression, driver)] = _accessors(keys, driver)
        attribute_names, capacity_names = access
        # map(dict.get, ...) runs in C: this is the allocator's innermost loop.
        key = (driver, tuple(map(device.attributes.get, attribute_names)), tuple(map(device.capacity.get, capacity_names)))
        self._last = (device, expression, key)
        return key

    def describe_reads(self, expression: str, device: PoolDevice) -> str:
        """`name=value, ...` of what the expression read on `device`; equal for devices that share a verdict."""
        keys = self.keys_read(expression)
        if not keys:
            return ""
        memo_key = (expression, self._memo_key(expression, device))
        shown = self._shown.get(memo_key)
        if shown is None:
            shown = self._shown[memo_key] = ", ".join(read_values(device, keys))
        return shown

    def _cel_device(self, device: PoolDevice) -> Any:
        cached = self._cel_devices.get(id(device))
        if cached is None:
            cached = self._cel.cel_device(device.id.driver, device.wire)
            self._cel_devices[id(device)] = cached
        return cached

    def evaluate(self, expression: str, device: PoolDevice) -> bool:
        program = self._program(expression)
        memo_key = (expression, self._memo_key(expression, device))
        verdict = self._memo.get(memo_key)
        if verdict is None:
            self.evaluations += 1
            try:
                verdict = bool(program.evaluate(self._cel_device(device)))
            except self._cel.CelRuntimeError as exc:
                verdict = getattr(exc, "message", str(exc))
            self._memo[memo_key] = verdict
        if isinstance(verdict, str):
            raise SelectorRuntimeError(verdict)
        return verdict
