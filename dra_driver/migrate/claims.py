"""The claims strategy: device-plugin requests of one pod spec become one ResourceClaimTemplate.

Design (docs/migration.md):
- One template per workload, one request per (container, resource). Requests of
  one claim never share devices, so every container keeps its own devices; each
  container names its request (`resources.claims[].request`) when the claim has
  more than one.
- App containers and sidecars (init containers with restartPolicy Always) run at
  the same time, so they always get their own requests. A regular init container
  runs before them and the device plugin let later containers reuse its devices;
  we keep that by pointing it at an existing request with the same resource and
  count when there is one, otherwise it gets its own (and the pod needs more devices).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from dra_driver.migrate.aliases import Unaliaser
from dra_driver.sources.operators import NIM_CLAIMS
from dra_driver.sources.workloads import Key, show_path
from dra_driver.migrate.context import Context
from dra_driver.migrate.counts import device_count, placeholder_kind
from dra_driver.migrate.edit import attach_trailing, eol_comment, remove_key, to_ruamel
from dra_driver.migrate.names import dns_label, dns_subdomain, spec_digest
from dra_driver.migrate.node_modes import GPU, PRODUCT_LABEL, gpu_meaning
from dra_driver.migrate.labels import is_gpu_label
from dra_driver.migrate.placement import AFFINITY, PlacementPlan, plan_placement
from dra_driver.model.api_group import API_VERSION
from dra_driver.model.resource_v1 import MAX_REQUESTS
from dra_driver.migrate.report import Action
from dra_driver.migrate.resources import HAMI_REASON, HAMI_SLICES, DeviceKind, Unsupported, classify
from dra_driver.migrate.tolerations import add_missing as add_tolerations
from dra_driver.sources.workloads import Workload

POD_CLAIM = "accelerators"  # spec.resourceClaims[].name in migrated pods
TEMPLATE_SUFFIX = "accelerators"


@dataclass
class ContainerDevices:
    """One device-plugin resource of one container."""

    container: CommentedMap
    name: str
    role: str  # "container" | "init" | "sidecar"
    path: str  # "spec.template.spec.containers[0]"
    slot: tuple[Key, ...]  # ("containers", 0): where the container sits in the pod spec; () for a NIMService
    kind: DeviceKind
    count: int
    in_requests: bool


@dataclass
class Request:
    name: str
    kind: DeviceKind
    count: int
    selectors: list[str] = field(default_factory=list)
    users: list[ContainerDevices] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        exactly: dict[str, Any] = {"deviceClassName": self.kind.device_class, "count": self.count}
        selectors = [*self.kind.selectors, *self.selectors]
        if selectors:
            exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
        return {"name": self.name, "exactly": exactly}


@dataclass
class Generated:
    template_name: str
    namespace: str | None
    template: CommentedMap


def template_name(workload: Workload, requests: list[Request]) -> str:
    """`<workload>-accelerators-<digest of the template spec>`.

    A ResourceClaimTemplate's spec is immutable, so a template whose requests
    change (a new GPU count, another selector) must get a new name: then
    `kubectl apply` creates it and rolls the workload over to it, instead of
    failing on the old name. The same spec always gives the same name.
    """
    digest = spec_digest([request.as_dict() for request in requests])
    return dns_subdomain(workload.name or workload.kind.lower(), workload.role, TEMPLATE_SUFFIX, digest)


def _containers(workload: Workload) -> list[tuple[str, str, tuple[Key, ...], CommentedMap]]:
    if workload.single_container:  # a NIMService's spec is its model container's settings too
        return [("container", workload.spec_path, (), workload.pod_spec)]
    found: list[tuple[str, str, tuple[Key, ...], CommentedMap]] = []
    for list_key in ("initContainers", "containers"):
        for index, container in enumerate(workload.pod_spec.get(list_key) or []):
            if not isinstance(container, CommentedMap):  # every map of a round-trip loaded document is one
                continue
            if list_key == "containers":
                role = "container"
            else:
                role = "sidecar" if container.get("restartPolicy") == "Always" else "init"
            found.append((role, f"{workload.spec_path}.{list_key}[{index}]", (list_key, index), container))
    return found


def _scan_container(
    ctx: Context, role: str, path: str, slot: tuple[Key, ...], container: CommentedMap,
    gpu: DeviceKind | Unsupported | None = None,
) -> list[ContainerDevices]:
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return []
    given_limits, given_requests = resources.get("limits"), resources.get("requests")
    limits = given_limits if isinstance(given_limits, Mapping) else {}
    requests = given_requests if isinstance(given_requests, Mapping) else {}
    name = str(container.get("name", ""))
    found: list[ContainerDevices] = []
    resources_asked = [*limits, *(r for r in requests if r not in limits)]
    slices = [str(r) for r in resources_asked if r in HAMI_SLICES]
    for resource in resources_asked:
        kind = gpu if resource == GPU and gpu is not None else classify(str(resource), ctx.catalog.names)
        if resource == GPU and slices:  # HAMi: a slice of a shared GPU, never an exclusive one
            kind = Unsupported(GPU, HAMI_REASON.format(resources=", ".join(slices)))
        at = f"{path}.resources"
        if kind is None:
            continue
        if isinstance(kind, Unsupported):
            ctx.leave(at, kind.resource, kind.reason)
            continue
        if resource not in limits:
            ctx.leave(f"{at}.requests", resource,
                      "set in requests but not in limits; the API requires extended resources in limits, fix that first")
            continue
        count = device_count(limits[resource])
        if resource in requests and device_count(requests[resource]) != count:
            ctx.refuse(f"{at}", f"{resource}: limits ({limits[resource]}) and requests ({requests[resource]}) disagree; "
                       "make them equal (or drop the request) and run again")
            continue
        # at the resources path, so that the finding speaks for the same entry in `requests` as well
        if count is None:
            ctx.leave(at, resource, _not_a_count(limits[resource]))
            continue
        if count <= 0:
            read_as = " (null, which Kubernetes reads as 0)" if limits[resource] is None else ""
            ctx.add(Action.NOT_CONVERTED, at, resource, f"count {count}{read_as} asks for no device; left as is")
            continue
        found.append(ContainerDevices(container, name, role, path, slot, kind, count, resource in requests))
    _check_mixed(ctx, path, found)
    return found


def _not_a_count(value: Any) -> str:
    what = placeholder_kind(value)
    if what is not None:
        return (f"count {str(value)!r} is {what}, not a number of devices; substitute it (envsubst, sed, helm template, "
                "kustomize replacements) and migrate the result")
    return f"count {value!r} is not a whole number of devices"


def _check_mixed(ctx: Context, path: str, devices: list[ContainerDevices]) -> None:
    """A whole GPU next to a partition of the same vendor in one container.

    NVIDIA's `mixed` MIG strategy exposes `nvidia.com/gpu` (GPUs not in MIG mode) and
    `nvidia.com/mig-*` on the same node, and our driver publishes the same split, so
    both convert: requests of one claim never share a device. The ROCm device plugin
    names a node's GPUs either all `amd.com/gpu` (single strategy) or all by partition
    mode (mixed: a whole GPU is `amd.com/spx_<nps>`), never both, so that pod never ran.
    """
    for vendor in {d.kind.vendor for d in devices}:
        mine = [d for d in devices if d.kind.vendor == vendor]
        if not (any(d.kind.partition for d in mine) and any(not d.kind.partition for d in mine)):
            continue
        names = ", ".join(d.kind.resource for d in mine)
        if vendor == "nvidia":
            ctx.add(Action.NOTE, f"{path}.resources", names,
                    "whole GPUs and MIG devices in one container (MIG mixed strategy): each becomes its own request, "
                    "and the requests of one claim never share a GPU")
            continue
        ctx.refuse(f"{path}.resources", f"asks for whole devices and partitions of the same vendor ({names}); the "
                   "device plugin exposes a node's GPUs either all as whole devices (single naming strategy) or all "
                   "by partition mode (mixed strategy, where a whole GPU is e.g. amd.com/spx_nps1), never both, so no "
                   "node could run this; ask for amd.com/spx_<nps> for the whole GPU, or keep one of them")


def _check_existing_claims(
    ctx: Context, workload: Workload, containers: list[tuple[str, str, tuple[Key, ...], CommentedMap]]
) -> None:
    for index, entry in enumerate(workload.pod_spec.get("resourceClaims") or []):
        if isinstance(entry, Mapping) and entry.get("name") == POD_CLAIM:
            ctx.refuse(f"{workload.spec_path}.resourceClaims[{index}]",
                       f"the pod already has a resourceClaims entry named {POD_CLAIM!r}, the name this tool generates; "
                       "rename it and run again")
    for _, path, _, container in containers:
        resources = container.get("resources") or {}
        for entry in (resources.get("claims") or []) if isinstance(resources, Mapping) else []:
            if isinstance(entry, Mapping) and entry.get("name") == POD_CLAIM:
                ctx.refuse(f"{path}.resources.claims", f"already refers to a claim named {POD_CLAIM!r}; rename it and run again")


def _build_requests(ctx: Context, devices: list[ContainerDevices]) -> list[Request]:
    requests: dict[str, Request] = {}
    shareable: list[Request] = []  # requests a later regular init container may reuse
    ordered = [d for d in devices if d.role != "init"] + [d for d in devices if d.role == "init"]
    for device in ordered:
        if device.role == "init":
            reuse = next((r for r in shareable if r.kind.resource == device.kind.resource and r.count == device.count), None)
            if reuse is not None:
                reuse.users.append(device)
                ctx.add(Action.NOTE, device.path, device.kind.resource,
                        f"init container {device.name!r} uses request {reuse.name!r}: it runs before the containers "
                        "that use it, as the device plugin reused init-container devices")
                continue
        name = dns_label(device.name, device.kind.short)
        if name in requests and requests[name].users[0].container is device.container:
            name = dns_label(device.name, device.kind.vendor, device.kind.short)  # e.g. amd.com/gpu next to nvidia.com/gpu
        if name in requests:
            ctx.refuse(device.path, f"generated request name {name!r} is not unique (duplicate container names?)")
            continue
        request = Request(name, device.kind, device.count, users=[device])
        requests[name] = request
        if device.role != "sidecar":
            shareable.append(request)
        if device.role == "init":
            ctx.add(Action.NOTE, device.path, device.kind.resource,
                    f"init container {device.name!r} gets its own {device.count} device(s), held for the pod's lifetime; "
                    "the device plugin let later containers reuse them, so the pod may need more devices now")
    order = {id(d.container): i for i, d in enumerate(devices)}
    return sorted(requests.values(), key=lambda r: order[id(r.users[0].container)])


def _apply_container_edits(requests: list[Request], claim_entries: bool = True) -> None:
    for request in requests:
        for device in request.users:
            resources = device.container["resources"]
            orphans: list[str] = []  # comment lines that followed a removed entry and need a new home
            remarks: list[str] = []  # end-of-line comments of the removed entries ("# Request 1 GPU")
            for part in ("limits", "requests"):
                values = resources.get(part)
                if isinstance(values, CommentedMap) and device.kind.resource in values:
                    remark = eol_comment(values, device.kind.resource)
                    if remark and remark not in remarks:
                        remarks.append(remark)
                    orphans += remove_key(values, device.kind.resource)
                    if not values:
                        orphans += remove_key(resources, part)
            if not claim_entries:  # NIMService: its claims are in draResources, an emptied resources map goes
                if not resources:
                    orphans += remove_key(device.container, "resources")
                attach_trailing(resources or device.container, orphans)
                continue
            claims = resources.get("claims")
            if not isinstance(claims, list):
                claims = CommentedSeq()
                resources["claims"] = claims
            entry = to_ruamel({"name": POD_CLAIM, **({"request": request.name} if len(requests) > 1 else {})})
            if entry not in claims:
                claims.append(entry)
                if remarks:  # the comment described the device request, which this entry now is
                    entry.yaml_add_eol_comment(" ".join(remarks), list(entry)[-1])
            attach_trailing(resources, orphans)


def _template(workload: Workload, name: str, requests: list[Request]) -> CommentedMap:
    metadata: dict[str, Any] = {"name": name}
    if workload.namespace:
        metadata["namespace"] = workload.namespace
    template = to_ruamel(
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceClaimTemplate",
            "metadata": metadata,
            "spec": {"spec": {"devices": {"requests": [r.as_dict() for r in requests]}}},
        }
    )
    template.yaml_set_start_comment(f"Generated by dra-driver migrate from {workload.ref}")
    return template


def migrate_workload(ctx: Context, workload: Workload) -> Generated | None:
    """Rewrite `workload` in place; returns the template to emit, or None when it asks for no devices."""
    containers = _containers(workload)
    gpu = gpu_meaning(workload.pod_spec, ctx.catalog.names)
    devices = [d for role, path, slot, c in containers for d in _scan_container(ctx, role, path, slot, c, gpu)]
    if isinstance(gpu, DeviceKind) and any(d.kind is gpu for d in devices):
        ctx.add(Action.NOTE, workload.spec_path, GPU,
                f"the pod selects MIG single-strategy nodes ({PRODUCT_LABEL} <model>-MIG-<profile>), where nvidia.com/gpu "
                f"is one MIG device of that profile: converted to {gpu.device_class}, not a whole GPU")
    if not devices:
        return None
    errors_before = len(ctx.errors)
    _check_existing_claims(ctx, workload, containers)
    requests = _build_requests(ctx, devices)
    if len(requests) > MAX_REQUESTS:
        ctx.refuse(workload.spec_path, f"{len(requests)} device requests exceed the {MAX_REQUESTS} a claim may hold")
    if len(ctx.errors) > errors_before:
        return None
    workload = _unalias_edit_paths(ctx, workload, devices)
    if len(ctx.errors) > errors_before:
        return None
    placement: PlacementPlan = plan_placement(ctx, workload, _unique_kinds(requests))
    for request in requests:
        request.selectors.extend(placement.selectors_for(request.kind))
    name = template_name(workload, requests)
    _apply_container_edits(requests, claim_entries=not workload.single_container)
    placement.apply()
    _keep_tolerations(ctx, workload, requests)
    _attach_claim(workload, name)
    for request in requests:
        names = ", ".join(repr(d.name) for d in request.users)
        users = "the model container" if workload.single_container else f"container {names}"
        ctx.add(Action.CONVERTED, request.users[0].path, request.kind.resource,
                f"{request.count} x {request.kind.device_class} as request {request.name!r} of template {name!r} "
                f"({users})")
    return Generated(name, workload.namespace, _template(workload, name, requests))


def _attach_claim(workload: Workload, template: str) -> None:
    """The pod's `resourceClaims` entry; a NIMService names the template in `draResources` (its pods get it whole)."""
    if workload.single_container:
        field, entry = NIM_CLAIMS, to_ruamel({"resourceClaimTemplateName": template})
    else:
        field, entry = "resourceClaims", to_ruamel({"name": POD_CLAIM, "resourceClaimTemplateName": template})
    if isinstance(workload.pod_spec.get(field), list):
        workload.pod_spec[field].append(entry)
    else:
        workload.pod_spec[field] = CommentedSeq([entry])


def _keep_tolerations(ctx: Context, workload: Workload, requests: list[Request]) -> None:
    """The tolerations ExtendedResourceToleration added while the pod requested these resources (tolerations.py)."""
    if not ctx.tolerations:
        return
    for resource in add_tolerations(workload.pod_spec, [r.kind.resource for r in requests]):
        ctx.add(Action.NOTE, f"{workload.spec_path}.tolerations", resource,
                f"added toleration {{key: {resource}, operator: Exists, effect: NoSchedule}}: the ExtendedResourceToleration "
                f"admission plugin (GKE and others) added it while the pod requested {resource}, and nodes tainted "
                f"{resource}:NoSchedule still need it; --no-tolerations leaves it out")


def _edit_paths(workload: Workload, devices: list[ContainerDevices]) -> list[tuple[Key, ...]]:
    """Key paths, from the pod spec, of every node the edits below may change (each the last of its path)."""
    spec = workload.pod_spec
    paths: list[tuple[Key, ...]] = [("resourceClaims",), ("tolerations",), (NIM_CLAIMS,)]
    for device in devices:
        container: tuple[Key, ...] = (*device.slot, "resources")
        paths += [container, (*container, "limits"), (*container, "requests"), (*container, "claims")]
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping) and any(is_gpu_label(str(label)) for label in selector):
        paths.append(("nodeSelector",))
    required: Any = spec
    for key in AFFINITY:
        required = required.get(key) if isinstance(required, Mapping) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if isinstance(terms, list) and terms and isinstance(terms[0], Mapping):
        expressions = terms[0].get("matchExpressions")
        if isinstance(expressions, list) and any(
            isinstance(e, Mapping) and is_gpu_label(str(e.get("key", ""))) for e in expressions
        ):
            chain: tuple[Key, ...] = (*AFFINITY, "nodeSelectorTerms", 0, "matchExpressions")
            paths += [chain[:depth] for depth in (1, 2, 3, 5, 6)]
    return paths


def _unalias_edit_paths(ctx: Context, workload: Workload, devices: list[ContainerDevices]) -> Workload:
    """Give this workload its own copy of every aliased node it edits; refuses (ctx) on merge keys.

    Copies replace nodes, so the workload and each device's container are looked up again afterwards.
    """
    if ctx.root is None:
        return workload
    unaliaser = Unaliaser(ctx, ctx.root)
    spec_keys: tuple[Key, ...] = workload.spec_keys
    prefix = workload.spec_path[: len(workload.spec_path) - len(show_path('', spec_keys))]
    if unaliaser.shared(workload.obj):
        ctx.refuse(prefix.rstrip("."), f"{workload.ref} is itself a YAML alias of another object; write it out in full")
        return workload
    owned = unaliaser.own(workload.obj, prefix, spec_keys)
    for path in _edit_paths(workload, devices):
        owned = owned and unaliaser.own(workload.obj, prefix, spec_keys + path)
    node: Any = workload.obj
    for key in spec_keys:
        node = node[key]
    for device in devices:
        container = node
        for key in device.slot:
            container = container[key]
        device.container = container
    return replace(workload, pod_spec=node)


def _unique_kinds(requests: list[Request]) -> list[DeviceKind]:
    kinds: dict[str, DeviceKind] = {}
    for request in requests:
        kinds.setdefault(request.kind.resource, request.kind)
    return list(kinds.values())
