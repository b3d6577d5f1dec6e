"""Where `explain` gets its ResourceSlices from: files, a simulated fleet, or a cluster.

- files: a kubectl List (what `discover -o json|yaml` prints), multi-document
  YAML or JSON, or a directory of such files (*.yaml, *.yml, *.json, by name);
- `--profile NAME --nodes N`: every installed vendor backend simulates the
  profile, and the inventory is rendered once per node `node-0` .. `node-<N-1>`;
- `--kubeconfig PATH`: resource.k8s.io/v1 ResourceSlices, DeviceClasses and
  ResourceClaims (their status.allocation marks devices in use) plus Node labels.

Besides slices, file input may carry DeviceClass and ResourceClaim documents;
they are returned too so the caller can merge classes and honour allocations.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_driver.common.wording import plural
from dra_driver.allocator.gcpause import collector_paused
from dra_driver.allocator.types import Allocated, DeviceID, Node
from dra_driver.common.errors import DraError, FieldError, UsageError, ValidationError
from dra_driver.ingest import SourcedObject, read_objects
from dra_driver.kube.api_source import ApiSource
from dra_driver.model.api_group import TAINT_RULE_API_VERSION
from dra_driver.model.validation import slice_errors

FILE_SUFFIXES = (".yaml", ".yml", ".json")


class FleetError(UsageError):
    """The fleet cannot be loaded (missing file, bad YAML, no backend, cluster unreachable)."""


@dataclass
class Fleet:
    slices: list[dict[str, Any]] = field(default_factory=list)
    classes: list[dict[str, Any]] = field(default_factory=list)
    class_origins: dict[str, SourcedObject] = field(default_factory=dict)  # DeviceClass name -> where a file holds it (errors' lines)
    claims: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)  # known Node objects (cluster only)
    allocatable: dict[str, dict[str, Any]] = field(default_factory=dict)  # node name -> status.allocatable (device plugins' extended resources)
    pods: list[dict[str, Any]] = field(default_factory=list)  # only `dra-driver fleet` reads them (who holds a claim)
    sources: list[str] = field(default_factory=list)
    taint_rules: list[dict[str, Any]] = field(default_factory=list)  # DeviceTaintRule (resource.k8s.io/v1alpha3)
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)  # cluster only (admin access)
    cluster: bool = False  # read from an API server: its DeviceClasses are the ones that exist
    simulated: bool = False  # nodes simulated from a profile (they run this driver: its shipped classes exist)
    slice_files: dict[str, list[str]] = field(default_factory=dict)  # slice name -> the files that hold it (--fleet)
    notes: list[str] = field(default_factory=list)  # what reading the fleet found worth saying (a slice given twice)
    server_version: str | None = None  # the API server's gitVersion ("v1.36.2"), cluster only; None when unreadable

    def merge(self, other: Fleet) -> None:
        self.slices += other.slices
        for name, files in other.slice_files.items():
            self.slice_files.setdefault(name, []).extend(files)
        self.notes += other.notes
        self.classes += other.classes
        self.class_origins.update(other.class_origins)
        self.claims += other.claims
        self.nodes += other.nodes
        self.allocatable.update(other.allocatable)
        self.taint_rules += other.taint_rules
        self.namespace_labels.update(other.namespace_labels)
        self.pods += other.pods
        self.sources += other.sources
        self.cluster = self.cluster or other.cluster
        self.simulated = self.simulated or other.simulated


# -- documents ------------------------------------------------------------------------------------


def read_documents(path: Path) -> list[dict[str, Any]]:
    """Every object in a YAML/JSON file (multi-document YAML and Lists are expanded).

    Read through the input layer (dra_driver/ingest): size, nesting, value and alias
    limits, and the Kubernetes envelope rules; it raises a one-line InputError.
    """
    return [found.obj for found in read_objects(path)]


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in FILE_SUFFIXES)
        if not files:
            raise FleetError(f"directory {path} holds no {', '.join(FILE_SUFFIXES)} files")
        return files
    if not path.exists():
        raise FleetError(f"fleet file {path} does not exist")
    return [path]


def _node(doc: Mapping[str, Any]) -> Node:
    """A Node object as the allocator needs it: name and labels."""
    meta = doc.get("metadata") or {}
    return Node(str(meta.get("name", "")), dict(meta.get("labels") or {}))


def _add_node(fleet: Fleet, doc: Mapping[str, Any]) -> None:
    """A Node object's name and labels, and its status.allocatable (what device plugins advertise)."""
    node = _node(doc)
    fleet.nodes.append(node)
    allocatable = (doc.get("status") or {}).get("allocatable")
    if isinstance(allocatable, Mapping):
        fleet.allocatable[node.name] = dict(allocatable)


def sort_objects(found: Iterable[SourcedObject], source: str) -> Fleet:
    """Split objects by kind; anything else than slices, classes, claims (and ignorable kinds) is an error."""
    fleet = Fleet(sources=[source])
    for item in found:
        doc = item.obj
        kind = doc.get("kind")
        if kind == "ResourceSlice":
            fleet.slices.append(dict(doc))
            fleet.slice_files.setdefault(_slice_name(doc), []).append(source)
        elif kind == "DeviceClass":
            fleet.classes.append(dict(doc))
            fleet.class_origins.update(class_origins([item]))
        elif kind == "ResourceClaim":
            fleet.claims.append(dict(doc))
        elif kind == "Node":
            _add_node(fleet, doc)
        elif kind == "DeviceTaintRule":
            fleet.taint_rules.append(dict(doc))
        elif kind == "Pod":
            fleet.pods.append(dict(doc))
        else:
            raise FleetError(
                f"{source}: {kind!r} objects are not part of a fleet (expected ResourceSlice, DeviceClass, ResourceClaim, Node, DeviceTaintRule or "
                "Pod)"
            )
    return fleet


def class_origins(found: Iterable[SourcedObject]) -> dict[str, SourcedObject]:
    """Where each DeviceClass among `found` is, by name (a later one replaces an earlier, as merge_classes does)."""
    return {str((item.obj.get("metadata") or {}).get("name", "")): item for item in found if item.obj.get("kind") == "DeviceClass"}


def _slice_name(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata")
    return str(meta.get("name") or "") if isinstance(meta, Mapping) else ""


def _drop_repeated_slices(fleet: Fleet) -> None:
    """A slice name is one object in a cluster: the same slice in two files (a dump and discover's output of one node)
    is read once, with a note naming the files. Different contents under one name stay, and the note says so:
    the pool they describe then has every device twice, which the scheduler refuses, as the view shows."""
    kept: dict[str, dict[str, Any]] = {}
    slices: list[dict[str, Any]] = []
    for doc in fleet.slices:
        name = _slice_name(doc)
        first = kept.get(name)
        if first is None or not name:
            kept[name] = doc
            slices.append(doc)
            continue
        files = " and ".join(dict.fromkeys(fleet.slice_files.get(name, [])))
        if first == doc:
            note = f"ResourceSlice {name} is in {files}: the same object given twice, read once"
        else:
            slices.append(doc)
            note = f"ResourceSlice {name} is in {files} with different contents; a cluster holds one object per name: give only one of them"
        if note not in fleet.notes:
            fleet.notes.append(note)
    fleet.slices = slices


class SharedValues:
    """One object for each distinct attribute, capacity and counter value of a fleet's devices.

    A fleet repeats a few hundred values ({"string": "NVIDIA H100 80GB HBM3"}, {"value": "80Gi"}) on every
    device of every node; as parsed, each is its own dict and string: ~60% of a mixed fleet's slices in memory
    (399 -> 150 MiB for the 1,000-node mix of bench/bench_fleet_scale.py). A value is shared only with one of
    the same member name and the same Python type and value ({"int": 1} never stands for {"bool": true}), so
    the slices' validation sees what was read. The shared dicts are read only, as every reader of a fleet's
    slices treats them."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, type, Any], dict[str, Any]] = {}

    def share(self, slices: Iterable[Any]) -> None:
        for obj in slices:
            spec = obj.get("spec") if isinstance(obj, dict) else None
            if not isinstance(spec, dict):
                continue
            for device in spec.get("devices") or ():
                if isinstance(device, dict):
                    self._values(device.get("attributes"))
                    self._values(device.get("capacity"))
                    for consumed in device.get("consumesCounters") or ():
                        if isinstance(consumed, dict):
                            self._values(consumed.get("counters"))
            for counter_set in spec.get("sharedCounters") or ():
                if isinstance(counter_set, dict):
                    self._values(counter_set.get("counters"))

    def _values(self, values: Any) -> None:
        """Each one-member value of `values` ({"string": ...}, {"value": ...}) replaced by the first equal one seen."""
        if type(values) is not dict:
            return
        seen = self._seen
        for key, value in values.items():
            try:
                ((member, inner),) = value.items()
                shared = seen.setdefault((member, type(inner), inner), value)
            except (AttributeError, ValueError, TypeError):  # not a one-member map of a scalar: left as read, validation names it
                continue
            if shared is not value:
                values[key] = shared  # same key: the dict's size does not change under the loop


def load_paths(paths: Sequence[str | Path]) -> Fleet:
    fleet = Fleet()
    # The parser already pauses the collector; the envelope checks and sorting after it copy
    # every object again, and each collection would rescan the millions just parsed (~0.1 s
    # of 1 s for a 40,000-device JSON file, docs/performance.md).
    with collector_paused():
        for raw in paths:
            for path in _files(Path(raw)):
                fleet.merge(sort_objects(read_objects(path), str(path)))
        _drop_repeated_slices(fleet)
        SharedValues().share(fleet.slices)
    return fleet


def check_slices(slices: Sequence[Mapping[str, Any]]) -> None:
    """Reject slices the API server would not have stored (ValidationError naming slice and field)."""
    errors: list[FieldError] = []
    with collector_paused():  # thousands of small per-device results, none cyclic
        for index, obj in enumerate(slices):
            name = (obj.get("metadata") or {}).get("name") or f"[{index}]"
            errors += slice_errors(obj, f"ResourceSlice {name}")
    if errors:
        raise ValidationError(errors, "fleet")


# -- simulated fleet ------------------------------------------------------------------------------


def simulated(profile_name: str, nodes: int, partitioning: str = "static", node_prefix: str = "node-", consumable_gpu_memory: bool = False) -> Fleet:
    """The slices of `nodes` identical nodes (`<node_prefix><index>`) running every vendor the profile describes.

    `consumable_gpu_memory`: the nodes run `dra-driver run --consumable-gpu-memory` (whole NVIDIA GPUs
    published with allowMultipleAllocations and a memory request policy, for claims that ask a share).

    Backends discover once; the inventory is rendered per node (pool = node name),
    so attribute values that embed a node name keep node-0's.
    """
    from dra_driver.backend.hardware_profiles import load_profile
    from dra_driver.model.render import render_pool
    from dra_driver.backend.registry import open_backends
    from dra_driver.backend.interface import BackendSettings

    if nodes < 1:
        raise FleetError(f"--nodes must be at least 1 (got {nodes})")
    try:
        profile = load_profile(profile_name)
    except DraError as exc:
        raise FleetError(str(exc)) from exc
    settings = BackendSettings(node_name="node-0", partitioning=partitioning, consumable_gpu_memory=consumable_gpu_memory)  # type: ignore[arg-type]  # str: the CLI's choices checked it
    opened = open_backends(settings, profile)
    try:
        if not opened.backends:
            reasons = "; ".join(str(e) for e in opened.unavailable) or "no vendor section matches an installed backend"
            raise FleetError(f"profile {profile.name}: no backend could simulate it ({reasons})")
        inventories = [backend.discover() for backend in opened.backends]
    finally:
        opened.close()
    mode = f"{partitioning}, consumable GPU memory" if consumable_gpu_memory else partitioning
    fleet = Fleet(sources=[f"profile {profile.name} x {plural(nodes, 'node')} ({mode})"], simulated=True)
    for index in range(nodes):
        for inventory in inventories:
            fleet.slices += render_pool(inventory, f"{node_prefix}{index}")
    return fleet


# -- cluster --------------------------------------------------------------------------------------


LIST_PAGE = 500  # objects per page of a LIST (the API server's default chunk size for kubectl)


LIST_TIMEOUT_S = (5.0, 120.0)  # connect, read: a page of 500 slices can take a while on a loaded server
PROGRESS_AFTER_S = 1.0  # a read slower than this says on stderr how far it got, at most once a second
_clock = time.monotonic  # the progress lines' clock (tests step it)


class ReadProgress:
    """One stderr line per second (after the first) of a cluster read: what is being listed and how many so far."""

    def __init__(self, server: str, write: Callable[[str], object] | None = None) -> None:
        self.server = server
        self._write = write or (lambda line: print(line, file=sys.stderr, flush=True))
        self._started = _clock()
        self._said = self._started - 1.0  # so the first line may come as soon as PROGRESS_AFTER_S has passed
        self.shown = False

    def page(self, what: str, count: int, more: bool) -> None:
        now = _clock()
        if now - self._started < PROGRESS_AFTER_S or now - self._said < 1.0:
            return
        self._said, self.shown = now, True
        self._write(f"reading {self.server}: {count:,} {what}{' so far' if more else ''} ({now - self._started:.1f} s)")

    def done(self, counts: Mapping[str, int]) -> None:
        if self.shown:
            read = ", ".join(f"{count:,} {what}" for what, count in counts.items())
            self._write(f"read {self.server} in {_clock() - self._started:.1f} s: {read}")


def from_cluster(source: ApiSource, with_pods: bool = False, progress: Callable[[str], object] | None = None) -> Fleet:
    """Slices, classes, claims and nodes (and pods when asked) from the cluster `source` names.

    The server is checked first (reachable, serving resource.k8s.io/v1: one line naming what is
    missing). Read only: one paginated LIST per resource (limit/continue), so a big cluster is never
    asked for everything in one response. A read slower than PROGRESS_AFTER_S reports how far it got
    through `progress` (default: a line on stderr), at most once a second.
    """
    from dra_driver.kube.k8s import ApiException, client

    from dra_driver.kube.client import JsonApi, api_client_for, load_configuration, server_label
    from dra_driver.kube.server_check import check_dra_served, without_retries

    configuration = without_retries(load_configuration(source=source))
    server = server_label(source, configuration)
    api_client = api_client_for(configuration)
    check_dra_served(JsonApi.of(api_client), server)
    resource = client.ResourceV1Api(api_client)
    core = client.CoreV1Api(api_client)

    read = ReadProgress(server, progress)
    counts: dict[str, int] = {}

    shared = SharedValues()

    def listed(call: Any, what: str) -> list[dict[str, Any]]:
        # Raw JSON, not the client's models: those drop fields they do not know.
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            paging = {"limit": LIST_PAGE, "_preload_content": False, "_request_timeout": LIST_TIMEOUT_S}
            try:
                response = call(_continue=token, **paging) if token else call(**paging)
                page = json.loads(response.data)
            except ApiException as exc:
                raise FleetError(f"API server {server}: listing failed: {exc.status} {exc.reason}") from exc
            except ValueError as exc:
                raise FleetError(f"API server {server} answered a LIST with something that is not JSON: {exc}") from exc
            except Exception as exc:  # connection errors come in many types
                raise FleetError(f"API server {server}: unreachable during a LIST ({' '.join(str(exc).split())[:200]})") from exc
            kept = [item for item in page.get("items") or [] if isinstance(item, dict)]
            if what == "ResourceSlices":
                shared.share(kept)  # page by page: the repeated values of a page are freed with its text
            items += kept
            token = (page.get("metadata") or {}).get("continue") or None
            read.page(what, len(items), token is not None)
            if not token:
                counts[what] = len(items)
                return items

    fleet = Fleet(sources=[f"cluster {server}"], cluster=True, server_version=_server_version(api_client))
    fleet.slices = [{"kind": "ResourceSlice", **item} for item in listed(resource.list_resource_slice, "ResourceSlices")]
    fleet.classes = [{"kind": "DeviceClass", **item} for item in listed(resource.list_device_class, "DeviceClasses")]
    fleet.claims = [{"kind": "ResourceClaim", **item} for item in listed(resource.list_resource_claim_for_all_namespaces, "ResourceClaims")]
    for item in listed(core.list_node, "Nodes"):
        _add_node(fleet, item)
    fleet.taint_rules = _taint_rules(client.ResourceV1alpha3Api(api_client), listed)
    fleet.namespace_labels = {
        str((item.get("metadata") or {}).get("name")): dict((item.get("metadata") or {}).get("labels") or {})
        for item in listed(core.list_namespace, "Namespaces")
    }
    if with_pods:
        fleet.pods = [{"kind": "Pod", **item} for item in listed(core.list_pod_for_all_namespaces, "Pods")]
    read.done(counts)
    try:
        api_client.close()
    except Exception:  # closing the pool is best effort
        pass
    return fleet


def _server_version(api_client: Any) -> str | None:
    """GET /version's gitVersion (what explain and template take the cluster's release from); None when unreadable."""
    from dra_driver.kube.client import JsonApi

    try:
        # raw JSON: the client's model refuses a /version that lacks fields it does not need
        version = JsonApi.of(api_client).request("GET", "/version", timeout=LIST_TIMEOUT_S).get("gitVersion")
    except Exception:  # an old or odd server: the tools fall back to their default release and say so
        return None
    return version[:64] if isinstance(version, str) and version else None


def _taint_rules(api: Any, listed: Any) -> list[dict[str, Any]]:
    """DeviceTaintRules exist only in resource.k8s.io/v1alpha3, served only where the cluster enables it."""
    try:
        return [
            {"apiVersion": TAINT_RULE_API_VERSION, "kind": "DeviceTaintRule", **item}
            for item in listed(api.list_device_taint_rule, "DeviceTaintRules")
        ]
    except FleetError as exc:
        if " 404 " in str(exc):  # the API version is not served: no rules
            return []
        raise


# -- allocations ----------------------------------------------------------------------------------


def claim_label(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))


def allocated_devices(claims: Iterable[Mapping[str, Any]], skip: Iterable[str] = ()) -> dict[DeviceID, Allocated]:
    """Devices other claims hold, from their status.allocation (admin-access results hold nothing)."""
    skipped = set(skip)
    out: dict[DeviceID, Allocated] = {}
    for doc in claims:
        label = claim_label(doc)
        if label in skipped:
            continue
        allocation = (doc.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("shareID"):
                continue  # a share of a multi-allocatable device: counted as consumed capacity, not held
            device = DeviceID(str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
            admin = bool(result.get("adminAccess"))
            if device not in out or out[device].admin_access:
                out[device] = Allocated(device, label, admin)
    return {k: v for k, v in out.items() if not v.admin_access}
