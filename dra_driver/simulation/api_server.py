"""An in-process Kubernetes API server for tests, demos and benchmarks.

It speaks real HTTP (stdlib `http.server`, threaded, 127.0.0.1, random port)
so the real `kubernetes` client runs unmodified against it: point a
`kubernetes.client.Configuration(host=server.url)` at it. It is the lowest
layer we replace; everything above it is production code.

Implemented semantics (what dra-driver uses, modelled on the real apiserver):
- resources: resource.k8s.io/v1 ResourceSlices and DeviceClasses (cluster
  scoped), ResourceClaims (namespaced, with a status subresource), core v1
  Nodes, Namespaces and Pods (read by `dra-driver fleet`); resource.k8s.io/v1alpha3
  DeviceTaintRules (cluster scoped);
- create with `generateName`, server-set `uid`, `creationTimestamp`,
  `generation` and a global `resourceVersion` counter; 409 AlreadyExists;
- update (PUT) with optimistic concurrency (409 Conflict on a stale
  resourceVersion or a different uid), immutable-field checks, status
  subresource separation; merge-style PATCH (merge, strategic and apply
  content types are all applied as JSON merge patches: field ownership is
  not tracked) and JSON patch;
- delete with preconditions (uid / resourceVersion), DELETE collection,
  garbage collection of dependents when an owner is deleted;
- list and watch with field selectors (`metadata.name`, `metadata.namespace`
  and per-resource labels such as `spec.nodeName`, `spec.driver`), label
  selectors (`k=v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`),
  limit/continue; watch from a resourceVersion (410 Expired once the history
  is compacted), `timeoutSeconds`, ADDED/MODIFIED/DELETED with objects that
  move in or out of a field selector reported as ADDED/DELETED;
- the watch cache's LIST semantics (measured on a v1.35.6 kube-apiserver): no
  `resourceVersion` is a consistent read (counted in `consistent_lists`, the
  real server's `apiserver_watch_cache_consistent_read_total`); `resourceVersion=0`
  is served from the cache, ignoring `limit`; `resourceVersionMatch=NotOlderThan`
  with a version is served from the cache, paginated, and answers 504
  "Too large resource version" when the cache does not reach that version;
  `resourceVersionMatch` without `resourceVersion` is 422. `hold_cache()` freezes
  the cache at the current state (a cache that lags behind etcd), `release_cache()`
  lets it catch up;
- group-version discovery (`/api/v1`, `/apis/<group>/<version>`: an
  APIResourceList), without the resource.k8s.io versions `ServerOptions.resource_versions` leaves out;
- 404 and 422 answers as `Status` objects; ResourceSlices are validated with
  `dra_driver.model.validation.slice_errors`;
- feature gates: with `partitionable_devices=False` the server drops
  `sharedCounters`/`consumesCounters` (and per-device node selection), with
  `taints=False` it drops `devices[].taints`, with `consumable_capacity=False`
  `allowMultipleAllocations` and `capacity[].requestPolicy`, like the real apiserver for
  disabled alpha fields (kube_features.go 1.35 defaults); with taints on it fills
  `timeAdded` (seconds precision).

Test hooks: `hold_cache()` / `release_cache()` (above), `inject()` makes the next N matching requests fail (409, 429 with
Retry-After, 500, 503, or a dropped connection), `slow()` delays the answer
to the next N matching requests (a slow API server), `drop_watches()` cuts every
open watch stream, `delete_as_other()` / `modify_as_other()` change objects
behind the client's back, `store.put()` / `objects()` seed and read objects,
and `requests` / `writes()` count requests by verb for benchmarks.
"""

from __future__ import annotations

import builtins
import copy
import json
import random
import re
import socket
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from dra_driver.model.validation import is_dns_subdomain, slice_errors

JsonObject = dict[str, Any]
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what the apiserver uses for generateName
_STATUS_REASONS = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


# --------------------------------------------------------------------------- resources


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool = False
    field_labels: tuple[str, ...] = ()
    immutable: tuple[str, ...] = ()  # dotted paths that may not change on update

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES: dict[str, ResourceType] = {
    r.plural: r
    for r in (
        ResourceType("", "v1", "nodes", "Node", namespaced=False, status_subresource=True),
        ResourceType("", "v1", "namespaces", "Namespace", namespaced=False),
        ResourceType("", "v1", "pods", "Pod", namespaced=True, status_subresource=True, field_labels=("spec.nodeName",)),
        ResourceType(
            "resource.k8s.io",
            "v1",
            "resourceslices",
            "ResourceSlice",
            namespaced=False,
            field_labels=("spec.nodeName", "spec.driver"),
            immutable=("spec.driver", "spec.nodeName", "spec.pool.name"),
        ),
        ResourceType("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", namespaced=True, status_subresource=True, immutable=("spec",)),
        ResourceType("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False),
        ResourceType("resource.k8s.io", "v1alpha3", "devicetaintrules", "DeviceTaintRule", namespaced=False, status_subresource=True),
    )
}
_BY_KIND = {r.kind: r for r in RESOURCES.values()}
_RESOURCE_GROUP = "resource.k8s.io"


def resource_for(kind_or_plural: str) -> ResourceType:
    """Look a resource up by kind ("ResourceSlice") or plural ("resourceslices")."""
    found = RESOURCES.get(kind_or_plural) or _BY_KIND.get(kind_or_plural)
    if found is None:
        raise KeyError(f"the simulated API server does not serve {kind_or_plural!r}; known: {sorted(RESOURCES)}")
    return found


@dataclass(frozen=True)
class ServerOptions:
    """Feature-gate emulation and limits."""

    partitionable_devices: bool = True  # DRAPartitionableDevices
    taints: bool = True  # DRADeviceTaints
    consumable_capacity: bool = True  # DRAConsumableCapacity
    history: int = 10_000  # watch events kept; older resourceVersions answer 410 Expired
    default_watch_timeout: float = 1800.0  # what the apiserver's min-request-timeout gives a watch
    # resource.k8s.io versions served (--runtime-config): () is a cluster without DRA, ("v1beta1",) an older one
    resource_versions: tuple[str, ...] = ("v1", "v1alpha3")
    git_version: str = "v1.35.0-dra-driver-sim"  # what /version answers (explain and template read the release from it)


# --------------------------------------------------------------------------- errors


class ApiError(Exception):
    """An answer other than success, rendered as a metav1 Status object."""

    def __init__(self, code: int, message: str, reason: str | None = None, details: JsonObject | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _STATUS_REASONS.get(code, "Unknown")
        self.details = details or {}
        self.headers: dict[str, str] = {}

    def status(self) -> JsonObject:
        body: JsonObject = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, f'{rt.qualified} "{name}" not found', details={"name": name, "group": rt.group, "kind": rt.plural})


def _conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(
        409, f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}', "Conflict", {"name": name, "group": rt.group, "kind": rt.plural}
    )


def _invalid(rt: ResourceType, name: str, causes: list[tuple[str, str]]) -> ApiError:
    text = "; ".join(f"{path}: {message}" for path, message in causes)
    return ApiError(
        422,
        f'{rt.kind}.{rt.group or "core"} "{name}" is invalid: {text}',
        "Invalid",
        {"name": name, "group": rt.group, "kind": rt.kind, "causes": [{"reason": "FieldValueInvalid", "field": p, "message": m} for p, m in causes]},
    )


# --------------------------------------------------------------------------- selectors


def _field_value(obj: Mapping[str, Any], path: str) -> Any:
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return None
        current = current.get(part)
    return current


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[tuple[str, str, str], ...] = ()  # (field, op, value), op in "=", "!="

    @classmethod
    def parse(cls, text: str | None, rt: ResourceType) -> FieldSelector:
        if not text:
            return cls()
        allowed = {"metadata.name", "metadata.namespace", *rt.field_labels}
        out = []
        for term in text.split(","):
            match = re.fullmatch(r"\s*([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*?)\s*", term)
            if not match:
                raise ApiError(400, f"invalid field selector term {term!r}")
            name, op, value = match.groups()
            if name not in allowed:
                raise ApiError(400, f"field label not supported: {name}")
            out.append((name, "!=" if op == "!=" else "=", value))
        return cls(tuple(out))

    def matches(self, obj: Mapping[str, Any]) -> bool:
        for name, op, value in self.requirements:
            actual = _field_value(obj, name)
            actual_text = "" if actual is None else str(actual)
            if (actual_text == value) != (op == "="):
                return False
        return True


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[tuple[str, str, frozenset[str]], ...] = ()  # op: in, notin, exists, !exists

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        if not text:
            return cls()
        terms = re.findall(r"(?:[^,(]|\([^)]*\))+", text)
        out = []
        for raw in terms:
            term = raw.strip()
            set_match = re.fullmatch(r"([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)", term)
            eq_match = re.fullmatch(r"([\w./-]+)\s*(==|!=|=)\s*([\w.-]*)", term)
            if set_match:
                key, op, values = set_match.groups()
                out.append((key, op, frozenset(v.strip() for v in values.split(",") if v.strip())))
            elif eq_match:
                key, op, value = eq_match.groups()
                out.append((key, "notin" if op == "!=" else "in", frozenset([value])))
            elif re.fullmatch(r"![\w./-]+", term):
                out.append((term[1:], "!exists", frozenset()))
            elif re.fullmatch(r"[\w./-]+", term):
                out.append((term, "exists", frozenset()))
            else:
                raise ApiError(400, f"unable to parse label selector term {term!r}")
        return cls(tuple(out))

    def matches(self, obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for key, op, values in self.requirements:
            present = key in labels
            if op == "exists" and not present or op == "!exists" and present:
                return False
            if op == "in" and (not present or labels[key] not in values):
                return False
            if op == "notin" and present and labels[key] in values:
                return False
        return True


@dataclass(frozen=True)
class Selection:
    namespace: str | None = None  # None: all namespaces
    fields: FieldSelector = field(default_factory=FieldSelector)
    labels: LabelSelector = field(default_factory=LabelSelector)

    def matches(self, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace", "") != self.namespace:
            return False
        return self.fields.matches(obj) and self.labels.matches(obj)


# --------------------------------------------------------------------------- patches


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (null deletes, objects merge, everything else replaces)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ApiError(422, f"JSON patch path {path!r} must start with '/'")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def json_patch(target: JsonObject, operations: Any) -> JsonObject:
    """RFC 6902 subset: add, remove, replace, test."""
    if not isinstance(operations, list):
        raise ApiError(400, "a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        parts = _pointer(str(op.get("path", "")))
        parent: Any = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.get(part)
            if parent is None:
                raise ApiError(422, f"JSON patch path {op.get('path')!r} does not exist")
        last = parts[-1]
        kind = op.get("op")
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op.get("value"):
                raise ApiError(422, f"JSON patch test failed at {op.get('path')!r}")
        elif kind == "remove":
            if isinstance(parent, list):
                parent.pop(int(last))
            elif parent.pop(last, None) is None:
                raise ApiError(422, f"JSON patch remove: {op.get('path')!r} does not exist")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(index, op.get("value"))
                else:
                    parent[index] = op.get("value")
            else:
                parent[last] = op.get("value")
        else:
            raise ApiError(422, f"unsupported JSON patch operation {kind!r}")
    return doc


# --------------------------------------------------------------------------- feature gates


_PER_DEVICE_NODE_FIELDS = ("consumesCounters", "nodeName", "nodeSelector", "allNodes")


def _uses_partitionable(obj: Mapping[str, Any] | None) -> bool:
    spec = (obj or {}).get("spec") or {}
    if spec.get("sharedCounters") or spec.get("perDeviceNodeSelection"):
        return True
    return any(any(d.get(k) for k in _PER_DEVICE_NODE_FIELDS) for d in spec.get("devices") or [] if isinstance(d, Mapping))


def _uses_consumable(obj: Mapping[str, Any] | None) -> bool:
    spec = (obj or {}).get("spec") or {}
    return any(d.get("allowMultipleAllocations") for d in spec.get("devices") or [] if isinstance(d, Mapping))


def _uses_taints(obj: Mapping[str, Any] | None) -> bool:
    spec = (obj or {}).get("spec") or {}
    return any(d.get("taints") for d in spec.get("devices") or [] if isinstance(d, Mapping))


def _now_rfc3339() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def prepare_slice_for_storage(obj: JsonObject, old: Mapping[str, Any] | None, options: ServerOptions) -> None:
    """Drop fields of disabled gates (unless the stored object already uses them) and default taint times."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    devices = [d for d in spec.get("devices") or [] if isinstance(d, dict)]
    if not options.partitionable_devices and not _uses_partitionable(old):
        spec.pop("sharedCounters", None)
        spec.pop("perDeviceNodeSelection", None)
        for device in devices:
            for key in _PER_DEVICE_NODE_FIELDS:
                device.pop(key, None)
    if not options.consumable_capacity and not _uses_consumable(old):
        for device in devices:
            device.pop("allowMultipleAllocations", None)
            for entry in (device.get("capacity") or {}).values():
                if isinstance(entry, dict):
                    entry.pop("requestPolicy", None)
    if not options.taints and not _uses_taints(old):
        for device in devices:
            device.pop("taints", None)
    for device in devices:
        for taint in device.get("taints") or []:
            if isinstance(taint, dict) and not taint.get("timeAdded"):
                taint["timeAdded"] = _now_rfc3339()


# --------------------------------------------------------------------------- store


@dataclass(frozen=True)
class WatchEvent:
    resource_version: int
    plural: str
    type: str  # ADDED, MODIFIED, DELETED
    obj: JsonObject
    old: JsonObject | None  # the object before a MODIFIED, for selector transitions


class ObjectStore:
    """Objects, the global resourceVersion counter and the event history."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.changed = threading.Condition()
        self._objects: dict[tuple[str, str, str], JsonObject] = {}
        self._rv = 0
        self._events: list[WatchEvent] = []
        self._compacted_rv = 0  # events at or below this rv are gone
        # The watch cache while held behind: (its resourceVersion, its objects, whether it catches up when asked for
        # a newer version, as the real one does within its 3 s wait). None: the cache is current.
        self._cache: tuple[int, dict[tuple[str, str, str], JsonObject], bool] | None = None

    # ---- plumbing

    @property
    def resource_version(self) -> int:
        with self.changed:
            return self._rv

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _emit(self, rt: ResourceType, kind: str, obj: JsonObject, old: JsonObject | None = None) -> None:
        self._events.append(WatchEvent(int(obj["metadata"]["resourceVersion"]), rt.plural, kind, copy.deepcopy(obj), old))
        if len(self._events) > self.options.history:
            dropped = self._events[: len(self._events) - self.options.history]
            self._compacted_rv = dropped[-1].resource_version
            del self._events[: len(dropped)]
        self.changed.notify_all()

    def compact(self) -> None:
        """Forget the event history: watches from older resourceVersions get 410 Expired."""
        with self.changed:
            self._compacted_rv = self._rv
            self._events.clear()

    @staticmethod
    def _key(rt: ResourceType, namespace: str | None, name: str) -> tuple[str, str, str]:
        return (rt.plural, (namespace or "") if rt.namespaced else "", name)

    def _stamp_new(self, rt: ResourceType, obj: JsonObject) -> None:
        meta = obj.setdefault("metadata", {})
        meta["uid"] = meta.get("uid") or str(uuid.uuid4())
        meta["creationTimestamp"] = meta.get("creationTimestamp") or _now_rfc3339()
        if "spec" in obj:
            meta["generation"] = 1
        meta["resourceVersion"] = self._next_rv()
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind

    # ---- direct access (Python API for tests)

    def put(self, obj: Mapping[str, Any]) -> JsonObject:
        """Create or replace an object without validation; returns the stored copy."""
        rt = resource_for(str(obj.get("kind")))
        new = copy.deepcopy(dict(obj))
        name = new.get("metadata", {}).get("name")
        if not name:
            raise ValueError("store.put needs metadata.name")
        with self.changed:
            key = self._key(rt, new["metadata"].get("namespace"), name)
            old = self._objects.get(key)
            if old is not None:
                for kept in ("uid", "creationTimestamp"):
                    new["metadata"].setdefault(kept, old["metadata"].get(kept))
                new["metadata"]["resourceVersion"] = self._next_rv()
                new["apiVersion"], new["kind"] = rt.api_version, rt.kind
            else:
                self._stamp_new(rt, new)
            self._objects[key] = new
            self._emit(rt, "MODIFIED" if old else "ADDED", new, old)
            return copy.deepcopy(new)

    def get(self, kind: str, name: str, namespace: str | None = None) -> JsonObject | None:
        rt = resource_for(kind)
        with self.changed:
            found = self._objects.get(self._key(rt, namespace, name))
            return copy.deepcopy(found) if found else None

    def list(self, kind: str, selection: Selection | None = None) -> list[JsonObject]:
        with self.changed:
            return self._select(self._objects, kind, selection)

    @staticmethod
    def _select(objects: Mapping[tuple[str, str, str], JsonObject], kind: str, selection: Selection | None) -> builtins.list[JsonObject]:
        rt = resource_for(kind)
        selection = selection or Selection()
        items = [o for (plural, _, _), o in sorted(objects.items()) if plural == rt.plural and selection.matches(o)]
        return copy.deepcopy(items)

    # ---- the watch cache

    def hold_cache(self, catch_up: bool = True) -> int:
        """Freeze the watch cache at the current state; returns its resourceVersion. Cache reads (resourceVersion=0,
        or NotOlderThan a version it holds) answer from it until release_cache(); with `catch_up` a read NotOlderThan a
        newer version sees the current state (the cache caught up within its wait), without, it answers 504."""
        with self.changed:
            self._cache = (self._rv, dict(self._objects), catch_up)
            return self._rv

    def release_cache(self) -> None:
        with self.changed:
            self._cache = None

    def cached(self, kind: str, selection: Selection, not_older_than: int) -> tuple[int, builtins.list[JsonObject]]:
        """A watch-cache read: (its resourceVersion, the objects); ApiError 504 when the cache does not reach the version."""
        with self.changed:
            held = self._cache
            if held is not None and not_older_than <= held[0]:
                return held[0], self._select(held[1], kind, selection)
            if (held is not None and not held[2]) or not_older_than > self._rv:
                current = held[0] if held is not None else self._rv
                error = ApiError(504, f"Timeout: Too large resource version: {not_older_than}, current: {current}", "Timeout")
                error.details["causes"] = [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]
                error.details["retryAfterSeconds"] = 1
                raise error
            return self._rv, self._select(self._objects, kind, selection)

    def remove(self, kind: str, name: str, namespace: str | None = None) -> JsonObject:
        rt = resource_for(kind)
        return self.delete(rt, namespace, name, None)

    # ---- API operations

    def _lookup(self, rt: ResourceType, namespace: str | None, name: str) -> JsonObject:
        found = self._objects.get(self._key(rt, namespace, name))
        if found is None:
            raise _not_found(rt, name)
        return found

    def _validate(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        name = obj["metadata"].get("name") or obj["metadata"].get("generateName", "")
        causes: list[tuple[str, str]] = []
        raw_name = obj["metadata"].get("name")
        if raw_name and not is_dns_subdomain(raw_name):
            causes.append(
                (
                    "metadata.name",
                    f"Invalid value: {raw_name!r}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'",
                )
            )
        if rt.plural == "resourceslices":
            causes.extend((e.path.removeprefix("ResourceSlice."), e.message) for e in slice_errors(obj))
        if old is not None:
            for path in rt.immutable:
                if _field_value(old, path) != _field_value(obj, path):
                    causes.append((path, "field is immutable"))
        if causes:
            raise _invalid(rt, name, causes)

    def create(self, rt: ResourceType, namespace: str | None, body: JsonObject) -> JsonObject:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        for server_field in ("uid", "resourceVersion", "creationTimestamp", "generation", "deletionTimestamp"):
            meta.pop(server_field, None)
        with self.changed:
            if not meta.get("name"):
                prefix = meta.get("generateName")
                if not prefix:
                    raise _invalid(rt, "", [("metadata.name", "Required value: name or generateName is required")])
                name = prefix + "".join(random.choice(_GENERATE_ALPHABET) for _ in range(5))
                while self._key(rt, namespace, name) in self._objects:
                    name = prefix + "".join(random.choice(_GENERATE_ALPHABET) for _ in range(5))
                meta["name"] = name
            if rt.plural == "resourceslices":
                prepare_slice_for_storage(obj, None, self.options)
            self._validate(rt, obj, None)
            key = self._key(rt, namespace, meta["name"])
            if key in self._objects:
                raise ApiError(
                    409,
                    f'{rt.qualified} "{meta["name"]}" already exists',
                    "AlreadyExists",
                    {"name": meta["name"], "group": rt.group, "kind": rt.plural},
                )
            if rt.status_subresource and rt.plural != "nodes":
                obj.pop("status", None)  # status is written through /status only
            self._stamp_new(rt, obj)
            self._objects[key] = obj
            self._emit(rt, "ADDED", obj)
            return copy.deepcopy(obj)

    def update(self, rt: ResourceType, namespace: str | None, name: str, body: JsonObject, subresource: str | None = None) -> JsonObject:
        meta = body.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise ApiError(400, f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})")
        with self.changed:
            old = self._lookup(rt, namespace, name)
            sent_rv = meta.get("resourceVersion")
            if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
                raise _conflict(rt, name, "the object has been modified; please apply your changes to the latest version and try again")
            if meta.get("uid") and meta["uid"] != old["metadata"]["uid"]:
                raise _conflict(rt, name, f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: {old['metadata']['uid']}")
            if subresource == "status":
                new = copy.deepcopy(old)
                new["status"] = copy.deepcopy(body.get("status"))
            else:
                new = copy.deepcopy(body)
                new_meta = new.setdefault("metadata", {})
                new_meta["name"] = name
                if rt.namespaced:
                    new_meta["namespace"] = namespace
                if rt.status_subresource:
                    if "status" in old:
                        new["status"] = copy.deepcopy(old["status"])
                    else:
                        new.pop("status", None)
                if rt.plural == "resourceslices":
                    prepare_slice_for_storage(new, old, self.options)
                self._validate(rt, new, old)
            return self._replace(rt, namespace, name, old, new)

    def _replace(self, rt: ResourceType, namespace: str | None, name: str, old: JsonObject, new: JsonObject) -> JsonObject:
        meta = new.setdefault("metadata", {})
        for kept in ("uid", "creationTimestamp", "generation"):
            if kept in old["metadata"]:
                meta[kept] = old["metadata"][kept]
        if "spec" in new and new.get("spec") != old.get("spec"):
            meta["generation"] = int(old["metadata"].get("generation", 0)) + 1
        if _without_rv(new) == _without_rv(old):
            return copy.deepcopy(old)  # a no-op write keeps the resourceVersion and sends no event
        meta["resourceVersion"] = self._next_rv()
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        self._objects[self._key(rt, namespace, name)] = new
        self._emit(rt, "MODIFIED", new, copy.deepcopy(old))
        return copy.deepcopy(new)

    def patch(self, rt: ResourceType, namespace: str | None, name: str, content_type: str, patch: Any, subresource: str | None = None) -> JsonObject:
        with self.changed:
            key = self._key(rt, namespace, name)
            old = self._objects.get(key)
            if old is None:
                if content_type.startswith("application/apply-patch") and isinstance(patch, dict):
                    body = copy.deepcopy(patch)
                    body.setdefault("metadata", {})["name"] = name
                    return self.create(rt, namespace, body)
                raise _not_found(rt, name)
            if content_type.startswith("application/json-patch"):
                patched = json_patch(old, patch)
            elif isinstance(patch, dict):
                patched = merge_patch(old, patch)
            else:
                raise ApiError(400, f"a {content_type} patch must be a JSON object")
            sent_rv = (patch.get("metadata") or {}).get("resourceVersion") if isinstance(patch, dict) else None
            if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
                raise _conflict(rt, name, "the object has been modified; please apply your changes to the latest version and try again")
            patched.setdefault("metadata", {})["resourceVersion"] = old["metadata"]["resourceVersion"]
            if subresource == "status":
                body = copy.deepcopy(old)
                body["status"] = patched.get("status")
                return self.update(rt, namespace, name, body, "status")
            return self.update(rt, namespace, name, patched)

    def delete(self, rt: ResourceType, namespace: str | None, name: str, preconditions: Mapping[str, Any] | None) -> JsonObject:
        with self.changed:
            old = self._lookup(rt, namespace, name)
            preconditions = preconditions or {}
            uid = preconditions.get("uid")
            if uid and uid != old["metadata"]["uid"]:
                raise _conflict(rt, name, f"Precondition failed: UID in precondition: {uid}, UID in object meta: {old['metadata']['uid']}")
            rv = preconditions.get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise _conflict(
                    rt,
                    name,
                    f"Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: "
                    f"{old['metadata']['resourceVersion']}",
                )
            del self._objects[self._key(rt, namespace, name)]
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = self._next_rv()
            self._emit(rt, "DELETED", gone)
            self._collect_dependents(old["metadata"]["uid"])
            return gone

    def _collect_dependents(self, owner_uid: str) -> None:
        """Background garbage collection: delete objects owned by a deleted object."""
        dependents = [
            (key, obj)
            for key, obj in self._objects.items()
            if any(ref.get("uid") == owner_uid for ref in obj["metadata"].get("ownerReferences") or [])
        ]
        for (plural, namespace, name), _ in dependents:
            self.delete(RESOURCES[plural], namespace or None, name, None)

    # builtins.list: inside this class `list` names the method above.
    def delete_collection(self, rt: ResourceType, selection: Selection) -> builtins.list[JsonObject]:
        with self.changed:
            victims = [o for (plural, _, _), o in sorted(self._objects.items()) if plural == rt.plural and selection.matches(o)]
            return [self.delete(rt, o["metadata"].get("namespace"), o["metadata"]["name"], None) for o in victims]

    def events_after(self, rv: int) -> builtins.list[WatchEvent]:
        """Events newer than rv; raises 410 Expired when history no longer reaches back that far."""
        if rv < self._compacted_rv:
            raise ApiError(410, f"too old resource version: {rv} ({self._compacted_rv + 1})", "Expired")
        return [e for e in self._events if e.resource_version > rv]


_DISCOVERY_PATH = re.compile(r"^/api/(?P<core>v1)/?$|^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/?$")


def _served(options: ServerOptions, group: str, version: str) -> bool:
    """Whether this server serves a group version: every one it has, except resource.k8s.io's unserved versions."""
    return group != _RESOURCE_GROUP or version in options.resource_versions


def _discovery(path: str, options: ServerOptions) -> JsonObject | None:
    """The APIResourceList of one group version (`/api/v1`, `/apis/<group>/<version>`), or None (not a discovery path,
    or a group version this server does not serve: the caller answers 404)."""
    match = _DISCOVERY_PATH.match(path)
    if match is None:
        return None
    group, version = (match.group("group") or "", match.group("core") or match.group("version"))
    group_version = f"{group}/{version}" if group else version
    if not _served(options, group, version):
        return None
    resources = [r for r in RESOURCES.values() if (r.group, r.version) == (group, version)]
    if not resources:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            {"name": r.plural, "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "list", "watch", *WRITE_VERBS]} for r in resources
        ],
    }


def _without_rv(obj: Mapping[str, Any]) -> JsonObject:
    stripped = copy.deepcopy(dict(obj))
    stripped.get("metadata", {}).pop("resourceVersion", None)
    return stripped


# --------------------------------------------------------------------------- faults


@dataclass
class Fault:
    verb: str | None  # get, list, watch, create, update, patch, delete, deletecollection; None = any
    resource: str | None  # plural; None = any
    code: int | None  # 0 = close the connection without an answer; None = answer normally (after delay_s)
    remaining: int | None  # None = until cleared
    retry_after: int | None = None
    message: str = "injected fault"
    delay_s: float = 0.0  # wait this long before answering (or failing)

    def matches(self, verb: str, resource: str) -> bool:
        return (self.verb in (None, verb)) and (self.resource in (None, resource))


# --------------------------------------------------------------------------- HTTP


@dataclass(frozen=True)
class RequestRecord:
    """One request as received, for tests that check what a client sent (headers, preconditions)."""

    verb: str
    resource: str
    path: str
    headers: dict[str, str]
    body: Any


_PATH = re.compile(
    r"^/(?:api/(?P<core_version>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<namespace>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?/?$"
)


@dataclass
class _Route:
    rt: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body are written separately; without TCP_NODELAY each answer
    # waits for a delayed ACK (~40 ms). The real apiserver sets it too.
    disable_nagle_algorithm = True
    server: _HttpServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # quiet: tests read counters, not access logs

    # ---- helpers

    def _send_json(self, code: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        payload = body.data if isinstance(body, _EncodedJson) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    def _send_error(self, error: ApiError) -> None:
        self._send_json(error.code, error.status(), error.headers)

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return None
        raw = self.rfile.read(length)
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            try:
                import yaml

                return yaml.safe_load(raw)
            except Exception as exc:  # any parse failure is the client's fault
                raise ApiError(400, f"cannot decode request body: {exc}") from exc

    def _route(self, path: str) -> _Route:
        match = _PATH.match(path)
        if not match:
            raise ApiError(404, f"the server could not find the requested resource ({path})")
        group = match.group("group") or ""
        version = match.group("core_version") or match.group("version")
        rt = RESOURCES.get(match.group("plural"))
        if rt is None or rt.group != group or rt.version != version or not self._served(group, version):
            raise ApiError(404, f"the server could not find the requested resource ({path})")
        namespace = match.group("namespace")
        if rt.namespaced is False and namespace:
            raise ApiError(404, f"{rt.plural} is not namespaced")
        sub = match.group("sub")
        if sub and not (sub == "status" and rt.status_subresource):
            raise ApiError(404, f"{rt.plural} has no subresource {sub!r}")
        return _Route(rt, namespace, match.group("name"), sub)

    def _served(self, group: str, version: str) -> bool:
        return _served(self.server.sim.options, group, version)

    def _group_discovery(self, path: str) -> JsonObject | None:
        """The APIGroup object `GET /apis/<group>` answers (None: not a discovery path or no version served)."""
        group = path.removeprefix("/apis/").rstrip("/")
        if not path.startswith("/apis/") or "/" in group:
            return None
        known = {rt.version for rt in RESOURCES.values() if rt.group == group}
        versions = sorted(self.server.sim.options.resource_versions if group == _RESOURCE_GROUP else known)
        if not versions:
            return None
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        preferred = next((e for e in entries if e["version"] == "v1"), entries[0])
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entries, "preferredVersion": preferred}

    @staticmethod
    def _verb(method: str, route: _Route, query: Mapping[str, list[str]]) -> str:
        watching = query.get("watch", ["false"])[0].lower() in ("true", "1")
        if method == "GET":
            return "get" if route.name else ("watch" if watching else "list")
        return {
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if route.name else "deletecollection",
        }[method]

    # ---- dispatch

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        sim = self.server.sim
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        if parts.path in ("/healthz", "/readyz", "/livez"):
            self._send_json(200, "ok")
            return
        if parts.path in ("/version", "/version/"):  # the kubernetes client asks with the slash
            version = sim.options.git_version
            major, _, rest = version.lstrip("v").partition(".")
            self._send_json(200, {"major": major, "minor": rest.split(".")[0], "gitVersion": version})
            return
        discovery = (self._group_discovery(parts.path) or _discovery(parts.path, sim.options)) if method == "GET" else None
        if discovery is not None:
            self._send_json(200, discovery)
            return
        try:
            body = self._read_body()
            route = self._route(parts.path)
            verb = self._verb(method, route, query)
            sim._count(verb, route.rt.plural)
            sim.request_log.append(RequestRecord(verb, route.rt.plural, self.path, dict(self.headers.items()), body))
            fault = sim._take_fault(verb, route.rt.plural)
            if fault is not None and fault.delay_s:
                sim._stopping.wait(fault.delay_s)  # a stop() ends the wait: tests tear down promptly
            if fault is not None and fault.code is not None:
                self._answer_fault(fault, fault.code)
                return
            if verb == "watch":
                self._watch(route, query)
                return
            code, result = self._execute(verb, route, query, body)
            if verb in WRITE_VERBS:
                sim._count_write(verb, route.rt.plural)
            self._send_json(code, result)
        except ApiError as error:
            self._send_error(error)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _answer_fault(self, fault: Fault, code: int) -> None:
        if code == 0:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        error = ApiError(code, fault.message)
        if fault.retry_after is not None:
            error.headers["Retry-After"] = str(fault.retry_after)
            error.details["retryAfterSeconds"] = fault.retry_after
        self._send_error(error)

    def _selection(self, route: _Route, query: Mapping[str, list[str]]) -> Selection:
        return Selection(
            namespace=route.namespace if route.rt.namespaced else None,
            fields=FieldSelector.parse(query.get("fieldSelector", [""])[0], route.rt),
            labels=LabelSelector.parse(query.get("labelSelector", [""])[0]),
        )

    def _execute(self, verb: str, route: _Route, query: Mapping[str, list[str]], body: Any) -> tuple[int, Any]:
        store = self.server.sim.store
        rt = route.rt
        if verb == "get":
            with store.changed:  # stored objects are replaced on write, never changed: encode without a copy
                return 200, _EncodedJson(json.dumps(store._lookup(rt, route.namespace, str(route.name))).encode())
        if verb == "list":
            return 200, self._list(route, query)
        if verb == "create":
            if not isinstance(body, dict):
                raise ApiError(400, "request body must be a JSON object")
            return 201, store.create(rt, route.namespace, body)
        if verb == "update":
            if not isinstance(body, dict):
                raise ApiError(400, "request body must be a JSON object")
            return 200, store.update(rt, route.namespace, str(route.name), body, route.subresource)
        if verb == "patch":
            content_type = self.headers.get("Content-Type", "application/merge-patch+json")
            return 200, store.patch(rt, route.namespace, str(route.name), content_type, body, route.subresource)
        if verb == "delete":
            options = body if isinstance(body, dict) else {}
            return 200, store.delete(rt, route.namespace, str(route.name), options.get("preconditions"))
        deleted = store.delete_collection(rt, self._selection(route, query))
        return 200, self._list_body(rt, deleted, store.resource_version)

    @staticmethod
    def _list_body(rt: ResourceType, items: list[JsonObject], rv: int, cont: str | None = None) -> JsonObject:
        for item in items:  # list items carry no apiVersion/kind in JSON, like the real server
            item.pop("apiVersion", None)
            item.pop("kind", None)
        meta: JsonObject = {"resourceVersion": str(rv)}
        if cont:
            meta["continue"] = cont
        return {"kind": f"{rt.kind}List", "apiVersion": rt.api_version, "metadata": meta, "items": items}

    def _list(self, route: _Route, query: Mapping[str, list[str]]) -> JsonObject:
        sim = self.server.sim
        store = sim.store
        selection = self._selection(route, query)
        version = query.get("resourceVersion", [""])[0]
        match = query.get("resourceVersionMatch", [""])[0]
        limit = int(query.get("limit", ["0"])[0] or 0)
        token = query.get("continue", [""])[0]
        if match and not version:
            raise ApiError(422, "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided")
        if match not in ("", "NotOlderThan") or (version not in ("", "0") and not match and limit > 0):
            raise ApiError(400, "the simulated API server serves no exact-version LIST (resourceVersionMatch=Exact)")
        if token:  # a later page: the token's position in the same selection (the real one names a snapshot)
            with store.changed:
                rv, items = store.resource_version, store.list(route.rt.kind, selection)
        elif not version:
            sim._count_list(route.rt.plural, "consistent")
            with store.changed:
                rv, items = store.resource_version, store.list(route.rt.kind, selection)
        else:
            sim._count_list(route.rt.plural, "cache")
            if not version.isdigit():
                raise ApiError(400, f"invalid resourceVersion {version!r}")
            rv, items = store.cached(route.rt.kind, selection, int(version))
            if version == "0":
                limit = 0  # the watch cache ignores limit for resourceVersion=0 (v1.35.6 answers every object at once)
        start = 0
        if token:
            try:
                start = int(token)
            except ValueError as exc:
                raise ApiError(400, f"invalid continue token {token!r}") from exc
        end = start + limit if limit > 0 else len(items)
        cont = str(end) if end < len(items) else None
        return self._list_body(route.rt, items[start:end], rv, cont)

    # ---- watch

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, route: _Route, query: Mapping[str, list[str]]) -> None:
        sim = self.server.sim
        store = sim.store
        selection = self._selection(route, query)
        timeout = float(query.get("timeoutSeconds", [sim.options.default_watch_timeout])[0])
        start_rv_text = query.get("resourceVersion", [""])[0]
        deadline = time.monotonic() + timeout
        with store.changed:
            if start_rv_text == "0":  # from the watch cache, possibly behind
                cursor, objects = store.cached(route.rt.kind, selection, 0)
                backlog = [("ADDED", o) for o in objects]
            elif start_rv_text == "":
                cursor = store.resource_version
                backlog = [("ADDED", o) for o in store.list(route.rt.kind, selection)]
            else:
                cursor = int(start_rv_text)
                try:
                    backlog = list(self._translate(store.events_after(cursor), route.rt, selection))
                except ApiError as error:
                    backlog = [("ERROR", error.status())]
                    deadline = 0.0
                cursor = store.resource_version
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        dropped = threading.Event()
        sim._watch_started(dropped)
        try:
            for kind, obj in backlog:
                self._write_chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
            while not dropped.is_set() and not sim._stopping.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                with store.changed:
                    events = [e for e in store._events if e.resource_version > cursor]
                    if not events:
                        store.changed.wait(min(remaining, 0.5))
                        continue
                    cursor = events[-1].resource_version
                for kind, obj in self._translate(events, route.rt, selection):
                    self._write_chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
            if dropped.is_set() or sim._stopping.is_set():
                # An abrupt end (no terminating chunk): what a dying apiserver or proxy looks like.
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            sim._watch_ended(dropped)

    @staticmethod
    def _translate(events: list[WatchEvent], rt: ResourceType, selection: Selection) -> Iterator[tuple[str, JsonObject]]:
        """Events as this watcher sees them: moves across its selector become ADDED/DELETED."""
        for event in events:
            if event.plural != rt.plural:
                continue
            now = selection.matches(event.obj)
            if event.type == "MODIFIED" and event.old is not None:
                before = selection.matches(event.old)
                if now and not before:
                    yield "ADDED", event.obj
                elif before and not now:
                    yield "DELETED", event.obj
                elif now:
                    yield "MODIFIED", event.obj
            elif now:
                yield event.type, event.obj


@dataclass(frozen=True)
class _EncodedJson:
    """An answer already encoded (a GET encodes the stored object under the store lock instead of copying it)."""

    data: bytes


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], sim: SimApiServer) -> None:
        self.sim = sim
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        self.sim._track(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.sim._untrack(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (or a connection we cut in stop()) is normal here, not a server bug.
        import sys

        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class SimApiServer:
    """The simulated API server. Use as a context manager, or call start()/stop().

    stop() followed by start() restarts on the same port with the same store,
    which is how tests simulate an API server outage.
    """

    def __init__(self, options: ServerOptions | None = None, port: int = 0) -> None:
        self.options = options or ServerOptions()
        self.store = ObjectStore(self.options)
        self.requests: Counter[tuple[str, str]] = Counter()  # (verb, plural) -> requests received
        self._writes: Counter[tuple[str, str]] = Counter()  # (verb, plural) -> successful writes
        # (plural, "consistent" | "cache") -> first-page LISTs by where they were served: a consistent read is the one
        # that falls back to etcd when the real watch cache lags (apiserver_watch_cache_consistent_read_total)
        self.lists: Counter[tuple[str, str]] = Counter()
        self.request_log: deque[RequestRecord] = deque(maxlen=1000)  # the most recent requests
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._watches: set[threading.Event] = set()
        self._sockets: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._port = port
        self._http: _HttpServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle

    def start(self) -> SimApiServer:
        if self._http is not None:
            return self
        self._stopping.clear()
        self._http = _HttpServer(("127.0.0.1", self._port), self)
        self._port = self._http.server_address[1]
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, name="sim-apiserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and cut every open connection (clients see connection errors)."""
        if self._http is None:
            return
        self._stopping.set()
        with self.store.changed:
            self.store.changed.notify_all()
        self._http.shutdown()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._http.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._http = None
        self._thread = None

    def __enter__(self) -> SimApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def client_configuration(self) -> Any:
        """A kubernetes.client.Configuration pointing at this server."""
        from dra_driver.kube.k8s import client

        config = client.Configuration(host=self.url)
        return config

    def api_client(self) -> Any:
        """A typed client as the tools build one (its User-Agent too), pointing at this server."""
        from dra_driver.kube.client import api_client_for

        return api_client_for(self.client_configuration())

    def json_api(self) -> Any:
        """The transport as the daemon builds one (kube/client.py's JsonApi), pointing at this server."""
        from dra_driver.kube.client import JsonApi

        return JsonApi(self.client_configuration())

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig file pointing at this server (no auth), for commands that take --kubeconfig."""
        import yaml

        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "sim",
            "clusters": [{"name": "sim", "cluster": {"server": self.url}}],
            "users": [{"name": "sim", "user": {}}],
            "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sim"}}],
        }))  # fmt: skip
        return path

    # ---- reading and seeding

    def objects(self, kind: str, **selectors: str) -> list[JsonObject]:
        """Stored objects of a kind; keyword filters are field paths with '__' for '.'.

        Example: server.objects("ResourceSlice", spec__nodeName="node-a").
        """
        items = self.store.list(kind)
        return [o for o in items if all(str(_field_value(o, k.replace("__", "."))) == v for k, v in selectors.items())]

    def add_node(self, name: str, labels: Mapping[str, str] | None = None) -> JsonObject:
        return self.store.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels or {})}, "spec": {}})

    def delete_as_other(self, kind: str, name: str, namespace: str | None = None) -> JsonObject:
        """Delete an object as another client would (the watchers see DELETED)."""
        return self.store.remove(kind, name, namespace)

    def modify_as_other(self, kind: str, name: str, change: Callable[[JsonObject], None], namespace: str | None = None) -> JsonObject:
        """Change an object in place as another client would (bypasses validation)."""
        obj = self.store.get(kind, name, namespace)
        if obj is None:
            raise KeyError(f"{kind} {name} not found")
        change(obj)
        return self.store.put(obj)

    def delete_collection_as_other(self, kind: str, **field_selector: str) -> list[JsonObject]:
        """What the kubelet does at start: DeleteCollection of slices by field selector."""
        rt = resource_for(kind)
        text = ",".join(f"{k.replace('__', '.')}={v}" for k, v in field_selector.items())
        return self.store.delete_collection(rt, Selection(fields=FieldSelector.parse(text, rt)))

    # ---- faults

    def inject(
        self,
        verb: str | None,
        resource: str | None,
        code: int,
        count: int | None = 1,
        retry_after: int | None = None,
        message: str | None = None,
    ) -> Fault:
        """Make the next `count` requests matching (verb, resource) fail with `code`.

        code 0 closes the connection without an answer; count None lasts until clear_faults().
        """
        if resource is not None:
            resource = resource_for(resource).plural
        fault = Fault(
            verb, resource, code, count, retry_after, message or f"injected {code or 'connection drop'} for {verb or '*'} {resource or '*'}"
        )
        with self._lock:
            self._faults.append(fault)
        return fault

    def slow(self, verb: str | None, resource: str | None, seconds: float, count: int | None = None) -> Fault:
        """Answer the next `count` requests matching (verb, resource) only after `seconds` (None: until clear_faults())."""
        if resource is not None:
            resource = resource_for(resource).plural
        fault = Fault(verb, resource, None, count, message=f"{seconds} s latency for {verb or '*'} {resource or '*'}", delay_s=seconds)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def hold_cache(self, catch_up: bool = True) -> int:
        """The watch cache stays at the current state (lags behind) until release_cache(): ObjectStore.hold_cache."""
        return self.store.hold_cache(catch_up)

    def release_cache(self) -> None:
        self.store.release_cache()

    def drop_watches(self) -> int:
        """Cut every open watch stream abruptly; returns how many were cut."""
        with self._lock:
            watches = list(self._watches)
        for dropped in watches:
            dropped.set()
        with self.store.changed:
            self.store.changed.notify_all()
        return len(watches)

    @property
    def open_watches(self) -> int:
        with self._lock:
            return len(self._watches)

    # ---- counters

    def writes(self, verb: str | None = None, resource: str | None = None) -> int:
        """Successful writes, optionally filtered by verb and resource (kind or plural)."""
        plural = resource_for(resource).plural if resource else None
        with self._lock:
            return sum(n for (v, r), n in self._writes.items() if verb in (None, v) and plural in (None, r))

    def consistent_lists(self, resource: str | None = None) -> int:
        """LISTs that asked for a consistent read (no resourceVersion), optionally of one resource (kind or plural)."""
        plural = resource_for(resource).plural if resource else None
        with self._lock:
            return sum(n for (r, where), n in self.lists.items() if where == "consistent" and plural in (None, r))

    def reset_counters(self) -> None:
        with self._lock:
            self.requests.clear()
            self._writes.clear()
            self.lists.clear()

    # ---- internal hooks for the handler

    def _count(self, verb: str, plural: str) -> None:
        with self._lock:
            self.requests[(verb, plural)] += 1

    def _count_list(self, plural: str, where: str) -> None:
        with self._lock:
            self.lists[(plural, where)] += 1

    def _count_write(self, verb: str, plural: str) -> None:
        with self._lock:
            self._writes[(verb, plural)] += 1

    def _take_fault(self, verb: str, plural: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(verb, plural):
                    if fault.remaining is not None:
                        fault.remaining -= 1
                        if fault.remaining <= 0:
                            self._faults.remove(fault)
                    return fault
        return None

    def _watch_started(self, dropped: threading.Event) -> None:
        with self._lock:
            self._watches.add(dropped)

    def _watch_ended(self, dropped: threading.Event) -> None:
        with self._lock:
            self._watches.discard(dropped)

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)

    def _untrack(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)
