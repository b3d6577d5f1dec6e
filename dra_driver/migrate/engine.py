"""Run a migration over whole YAML streams: all input is checked before any output is produced."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from dra_driver.common.errors import FieldError
from dra_driver.migrate import helm
from dra_driver.migrate import stream as streams
from dra_driver.migrate.aliases import Unaliaser
from dra_driver.migrate.catalog import ClassCatalog, load as load_catalog
from dra_driver.migrate.capacity import capacity_kind, kueue_queue_label, migrate_capacity, note_kueue
from dra_driver.migrate.claims import Generated, migrate_workload
from dra_driver.migrate.mentions import Mention, is_dra_object, mentions
from dra_driver.migrate.context import Context
from dra_driver.migrate.edit import to_ruamel
from dra_driver.migrate.relevance import SHARING_MARKERS, may_matter
from dra_driver.migrate.report import Action, Finding, Location, MigrationError, Report
from dra_driver.backend.vocabulary import VENDOR_DOMAINS
from dra_driver.model.api_group import API_VERSION
from dra_driver.migrate.resources import HAMI_REASON, HAMI_SLICES, DeviceKind, Unsupported, mentions_resource
from dra_driver.migrate.node_modes import GPU, gpu_meaning
from dra_driver.migrate.counts import device_count
from dra_driver.sources.operators import RAY_GPUS, operator_kind, ray_group
from dra_driver.sources.workloads import POD_SPEC_PATHS, Workload, find_resource_maps, is_list, metadata, show_path, workloads

STRATEGIES = ("claims", "extended-resource")


@dataclass
class Options:
    strategy: str = "claims"
    # The shipped classes unless told otherwise: with an empty catalog MIG profiles would lose their classes and
    # extended-resource output could emit a class under a shipped class's name.
    catalog: ClassCatalog = field(default_factory=load_catalog)
    tolerations: bool = True  # add the toleration ExtendedResourceToleration gave pods for each converted resource


@dataclass
class FileResult:
    source: str
    original: str
    output: str

    @property
    def changed(self) -> bool:
        return self.output != self.original


@dataclass
class _Item:
    """One object of a document, with the List items sequence holding it (None at top level)."""

    prefix: str
    obj: Mapping[str, Any]
    parent: list[Any] | None


def _items(data: Any, prefix: str = "", parent: list[Any] | None = None) -> Iterator[_Item]:
    if is_list(data):
        for index, item in enumerate(data["items"]):
            yield from _items(item, f"{prefix}items[{index}].", data["items"])
    elif isinstance(data, Mapping):
        yield _Item(prefix, data, parent)


def _describe(obj: Mapping[str, Any]) -> str:
    name, namespace = metadata(obj)
    if "kind" not in obj and not name:
        return ""  # not an object (a values file): the file, document and path say where
    return f"{obj.get('kind', '?')}/{namespace + '/' if namespace else ''}{name}"


def _in_vendor_domain(key: str) -> bool:
    domain = key.split("/", 1)[0] if "/" in key else ""
    return any(domain == d or domain.endswith("." + d) for d in VENDOR_DOMAINS)


def _report_annotations(ctx: Context, item: _Item) -> None:
    places = [("metadata.annotations", item.obj.get("metadata"))]
    spec_path = POD_SPEC_PATHS.get(str(item.obj.get("kind", "")))
    if spec_path and spec_path[:-1]:  # a Pod's own metadata is the pod's: already the first place
        node: Any = item.obj
        for key in spec_path[:-1]:
            node = node.get(key) if isinstance(node, Mapping) else None
        places.append((".".join(spec_path[:-1]) + ".metadata.annotations", node.get("metadata") if isinstance(node, Mapping) else None))
    for path, meta in places:
        annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
        for key in annotations or {}:
            if _in_vendor_domain(str(key)):
                ctx.add(Action.NOT_CONVERTED, f"{item.prefix}{path}", str(key),
                        "device-plugin annotation (e.g. sharing or time-slicing settings) has no DRA equivalent this tool "
                        "can write; kept as is, set the equivalent claim configuration by hand")


def _report_configmap(ctx: Context, item: _Item) -> None:
    for key, value in (item.obj.get("data") or {}).items():
        if isinstance(value, str) and any(marker in value for marker in SHARING_MARKERS):
            ctx.add(Action.NOT_CONVERTED, f"{item.prefix}data.{key}", str(key),
                    "device-plugin sharing configuration (time-slicing / MPS); DRA sets sharing per claim through "
                    "opaque GpuConfig, which this tool does not write")


def _device_resources(obj: Mapping[str, Any], catalog: ClassCatalog) -> Iterator[tuple[str, DeviceKind | Unsupported]]:
    if is_dra_object(obj):
        return
    for found in mentions(obj, catalog.names):
        yield found.path, found.kind


EMBEDDED_REASON = (
    "a device-plugin request inside a string (a manifest kept as text, such as a Job in a ConfigMap's data, applied "
    "later by a script or an operator); migrate never rewrites text inside strings: save that manifest to a file, "
    "migrate it (dra-driver migrate FILE), and put the result back in the string"
)


def _unreported_reason(item: _Item, mention: Mention) -> str:
    """Why a device-plugin name in this object stays: its kind's own advice, or where it sits."""
    if mention.embedded:
        return EMBEDDED_REASON
    kind = item.obj.get("kind", "?")
    entry = operator_kind(item.obj)
    if entry is not None and not entry.convert:
        return f"{kind}: {entry.check}"
    if helm.is_values_like(item.obj):
        return helm.VALUES_REASON
    if workloads(item.obj, item.prefix) is not None:
        return (f"a device-plugin resource named outside the containers' resources of this {kind}, where this tool "
                "converts requests; left as is: check what reads it")
    return (f"kind {kind} ({item.obj.get('apiVersion', '?')}) is not a workload this tool knows (operators build "
            "their own pods; the kinds it converts are listed in docs/migration.md); left untouched - use "
            "--strategy extended-resource, or give the pods it creates a ResourceClaim by hand")


def _covered(finding: Finding, mention: Mention, anywhere: bool) -> bool:
    """`finding` speaks for `mention`: the same resource at or around its path (`anywhere` in the object for quotas)."""
    subjects = {s.strip() for s in finding.subject.split(",")}
    return mention.resource in subjects and (
        anywhere or mention.path.startswith(finding.where.path) or finding.where.path.startswith(mention.path))


def _report_leftovers(ctx: Context, item: _Item, earlier: list[Finding]) -> None:
    """Every device-plugin name of the object that nothing above converted or reported (mentions.py)."""
    if is_dra_object(item.obj):
        return
    anywhere = capacity_kind(item.obj) is not None  # one finding per quota resource speaks for all its entries
    for found in mentions(item.obj, ctx.catalog.names, item.prefix):
        if any(_covered(f, found, anywhere and not found.embedded) for f in earlier if f.where.obj == ctx.obj):
            continue
        ctx.leave(found.path, found.resource, _unreported_reason(item, found))


@dataclass
class _Pending:
    document: streams.Document
    item: _Item
    generated: Generated


def _existing_templates(stream: streams.Stream) -> set[tuple[str, str]]:
    found = set()
    for document in stream.documents:
        for item in _items(document.data):
            if item.obj.get("kind") == "ResourceClaimTemplate":
                name, namespace = metadata(item.obj)
                found.add((namespace or "", name))
    return found


def _ray_container_gpus(pod: Workload) -> int | None:
    """nvidia.com/gpu of the Ray container (the first), which KubeRay turns into `ray start --num-gpus`."""
    containers = pod.pod_spec.get("containers") or []
    resources = containers[0].get("resources") if containers and isinstance(containers[0], Mapping) else None
    limits = resources.get("limits") if isinstance(resources, Mapping) else None
    return device_count(limits[GPU]) if isinstance(limits, Mapping) and GPU in limits else None


def _keep_ray_gpu_count(ctx: Context, pod: Workload, gpus: int | None) -> None:
    """Set rayStartParams num-gpus where KubeRay would have derived it from the limit the migration removed."""
    if ray_group(pod.obj, pod.spec_keys) is None or not gpus:
        return
    prefix = pod.spec_path[: len(pod.spec_path) - len(show_path("", pod.spec_keys))]
    # rayStartParams shared through a YAML alias (head and workers alike) gets a copy of its own first
    if ctx.root is not None and not Unaliaser(ctx, ctx.root).own(pod.obj, prefix, (*pod.spec_keys[:-2], "rayStartParams")):
        return
    group = ray_group(pod.obj, pod.spec_keys)
    assert group is not None
    params = group.get("rayStartParams")
    if isinstance(params, Mapping) and RAY_GPUS in params:
        return
    if isinstance(params, MutableMapping):
        params[RAY_GPUS] = str(gpus)
    else:
        group["rayStartParams"] = to_ruamel({RAY_GPUS: str(gpus)})
    at = pod.spec_path.removesuffix(".template.spec") + ".rayStartParams"
    ctx.add(Action.NOTE, at, RAY_GPUS, f"set to {gpus!r}: KubeRay derived it from the nvidia.com/gpu limit this "
            "migration removed (ray start --num-gpus, autoscaler group sizes)")


def _migrate_claims(ctx: Context, all_streams: list[streams.Stream]) -> list[_Pending]:
    pending: list[_Pending] = []
    for stream in all_streams:
        # Files are independent (often alternatives: 25 variants of one Deployment), so names clash only within one.
        taken = _existing_templates(stream)
        ctx.file = stream.source
        for index, document in enumerate(stream.documents):
            ctx.document = index + 1
            ctx.root = document.data
            for item in _items(document.data):
                ctx.obj = _describe(item.obj)
                _report_annotations(ctx, item)
                if item.obj.get("kind") == "ConfigMap":
                    _report_configmap(ctx, item)
                start = len(ctx.report.findings)
                _migrate_item(ctx, document, item, taken, pending)
                _report_leftovers(ctx, item, ctx.report.findings[start:])
    return pending


def _migrate_item(ctx: Context, document: streams.Document, item: _Item, taken: set[tuple[str, str]],
                  pending: list[_Pending]) -> None:
    """Convert one object's pod specs (or its quota), adding the templates to emit to `pending`."""
    quota_changed = migrate_capacity(ctx, item.obj, item.prefix, "claims")
    if quota_changed is not None:
        document.changed = document.changed or quota_changed
        return
    converted: list[Workload] = []
    for pod in workloads(item.obj, item.prefix) or []:
        ray_gpus = _ray_container_gpus(pod)
        generated = migrate_workload(ctx, pod)
        if generated is None:
            continue
        _keep_ray_gpu_count(ctx, pod, ray_gpus)
        key = (generated.namespace or "", generated.template_name)
        if key in taken:
            ctx.refuse("metadata.name", f"ResourceClaimTemplate {generated.template_name!r} (generated "
                       f"for {pod.ref}) already exists in the input or is generated twice; rename the "
                       "workload or the existing template")
            continue
        taken.add(key)
        ctx.add(Action.GENERATED, "", f"ResourceClaimTemplate/{generated.template_name}", f"for {pod.ref}")
        if pod.name.endswith("*"):
            ctx.add(Action.NOTE, "metadata.generateName", f"ResourceClaimTemplate/{generated.template_name}",
                    "the workload has a generateName, the template a fixed name: every object created from "
                    "this manifest uses the same template (each pod still gets its own claim); apply the "
                    "template once (kubectl apply), since creating this file twice fails on it")
        document.changed = True
        converted.append(pod)
        pending.append(_Pending(document, item, generated))
    if not converted:
        return
    entry = operator_kind(item.obj)
    if entry is not None:
        ctx.add(Action.NOTE, "", str(item.obj.get("kind")), f"operator resource converted; check: {entry.check}")
    labels = kueue_queue_label(item.obj, [pod.spec_keys for pod in converted])
    if labels is not None:
        note_kueue(ctx, item.prefix + labels)


def _json_list(document: streams.Document) -> list[Any]:
    """The items of the `List` a JSON document's object becomes, so that its templates can join it as JSON.

    A JSON file is one JSON value: a second document (`---`) would make it YAML. kubectl applies a List's items.
    """
    data = document.data
    if not (isinstance(data, Mapping) and data.get("kind") == "List" and data.get("apiVersion") == "v1"):
        document.data = CommentedMap([("apiVersion", "v1"), ("kind", "List"), ("items", CommentedSeq([data]))])
    return document.data["items"]


def _insert_templates(stream: streams.Stream, pending: list[_Pending]) -> None:
    for entry in pending:
        if entry.item.parent is None and entry.document.is_json:
            entry.item.parent = _json_list(entry.document)
        if entry.item.parent is not None:
            items = entry.item.parent
            position = next(i for i, obj in enumerate(items) if obj is entry.item.obj)
            items.insert(position, entry.generated.template)
            continue
        position = next(i for i, d in enumerate(stream.documents) if d is entry.document)
        helm_source = "".join(line for line in entry.document.prefix.splitlines(keepends=True) if line.startswith("# Source:"))
        stream.documents.insert(position, streams.Document(
            separator=entry.document.separator, prefix=helm_source, body="", data=entry.generated.template, generated=True,
            indent=entry.document.indent,
        ))
        entry.document.separator = "---\n"


def _existing_extended(all_streams: list[streams.Stream]) -> set[str]:
    names = set()
    for stream in all_streams:
        for document in stream.documents:
            for item in _items(document.data):
                if item.obj.get("kind") == "DeviceClass":
                    spec = item.obj.get("spec") or {}
                    if spec.get("extendedResourceName"):
                        names.add(str(spec["extendedResourceName"]))
    return names


def _generated_extended_class(kind: DeviceKind) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": kind.extended_class},
        "spec": {
            "selectors": [{"cel": {"expression": s}} for s in kind.extended_selectors],
            "extendedResourceName": kind.resource,
        },
    }


def _extended_for(ctx: Context, path: str, kind: DeviceKind) -> dict[str, Any] | None:
    """The class to emit for `kind`, or None when a known class already serves it (or its name is taken).

    A known class (shipped with the driver, or in --deviceclasses) is referenced, never
    re-emitted: applying a copy would overwrite the installed one and its labels.
    """
    known = ctx.catalog.by_extended_resource(kind.resource)
    if known is not None:
        ctx.add(Action.NOTE, path, kind.resource,
                f"served by the existing DeviceClass {known['metadata']['name']} (extendedResourceName "
                f"{kind.resource}), installed with the driver's deviceclasses/; not emitted again. Pods keep asking "
                f"for {kind.resource} (needs the DRAExtendedResource feature gate, alpha in 1.35)")
        return None
    if kind.extended_class in ctx.catalog.names:
        ctx.leave(path, kind.resource,
                  f"the class name this tool would generate, {kind.extended_class}, belongs to an existing DeviceClass "
                  "for another resource; write a DeviceClass with this extendedResourceName by hand")
        return None
    return _generated_extended_class(kind)


def _sliced_gpus(pod_spec: Mapping[str, Any], path: str) -> Iterator[tuple[str, list[str]]]:
    """(resources path, HAMi slice resources) of every map asking for nvidia.com/gpu together with HAMi slices."""
    for at, values in find_resource_maps(pod_spec, f"{path}."):
        slices = [str(r) for r in values if r in HAMI_SLICES]
        if GPU in values and slices:
            yield at, slices


def _report_gpu_meaning(ctx: Context, item: _Item) -> None:
    """Pods whose nvidia.com/gpu is a MIG device, a time-sliced replica or a HAMi slice: an extended resource is a whole GPU."""
    for pod in workloads(item.obj, item.prefix) or []:
        for at, slices in _sliced_gpus(pod.pod_spec, pod.spec_path):
            ctx.leave(at, GPU, "with extendedResourceName nvidia.com/gpu the scheduler allocates a whole, exclusive GPU; "
                      + HAMI_REASON.format(resources=", ".join(slices)))
        meaning = gpu_meaning(pod.pod_spec, ctx.catalog.names)
        if meaning is None or not any(GPU in (limits or {}) for _, limits in find_resource_maps(pod.pod_spec)):
            continue
        what = (f"one {meaning.device_class} MIG device (use the claims strategy for this pod)"
                if isinstance(meaning, DeviceKind) else meaning.reason)
        ctx.leave(pod.spec_path, GPU,
                  "with extendedResourceName nvidia.com/gpu the scheduler allocates a whole, exclusive GPU, but for this "
                  f"pod nvidia.com/gpu means {what}")


def _migrate_extended(ctx: Context, all_streams: list[streams.Stream]) -> None:
    """Workloads stay as they are; one DeviceClass with extendedResourceName per resource no class serves yet."""
    present = _existing_extended(all_streams)
    handled: set[str] = set()
    for stream in all_streams:
        ctx.file = stream.source
        new_documents: list[streams.Document] = []
        for index, document in enumerate(stream.documents):
            ctx.document = index + 1
            for item in _items(document.data):
                ctx.obj = _describe(item.obj)
                migrate_capacity(ctx, item.obj, item.prefix, "extended-resource")
                _report_gpu_meaning(ctx, item)
                for path, kind in _device_resources(item.obj, ctx.catalog):
                    if isinstance(kind, Unsupported):
                        ctx.leave(f"{item.prefix}{path}", kind.resource, kind.reason)
                        continue
                    if kind.resource in present or kind.resource in handled:
                        continue
                    handled.add(kind.resource)
                    device_class = _extended_for(ctx, f"{item.prefix}{path}", kind)
                    if device_class is None:
                        continue
                    ctx.add(Action.GENERATED, f"{item.prefix}{path}", f"DeviceClass/{device_class['metadata']['name']}",
                            f"extendedResourceName {kind.resource}: pods keep asking for {kind.resource} and the scheduler "
                            "allocates it through DRA (needs the DRAExtendedResource feature gate, alpha in 1.35)")
                    template = to_ruamel(device_class)
                    template.yaml_set_start_comment(f"Generated by dra-driver migrate --strategy extended-resource for {kind.resource}")
                    new_documents.append(streams.Document("---\n", "", "", template, generated=True))
        last = stream.documents[-1] if stream.documents else None
        if new_documents and last is not None and last.is_json and isinstance(last.data, Mapping):  # one JSON value
            _json_list(last).extend(document.data for document in new_documents)
            last.changed = True
        else:
            stream.documents.extend(new_documents)


def migrate(inputs: list[tuple[str, str]], options: Options) -> tuple[list[FileResult], Report]:
    """Migrate each (source name, text); raises MigrationError, with every problem found, before any output."""
    if options.strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {options.strategy!r}; choose one of {', '.join(STRATEGIES)}")
    report = Report()
    errors: list[FieldError] = []
    parsed: list[streams.Stream] = []
    for source, text in inputs:
        template = helm.template_reason(text)
        if template is not None:
            report.add(Action.NOT_CONVERTED, Location(source, None), source, template, remains=mentions_resource(text))
            parsed.append(streams.Stream(source, []))  # no documents: written back as it was
            continue
        try:
            parsed.append(streams.split(text, source, only=may_matter))
        except MigrationError as exc:
            errors.extend(exc.errors)
    if errors:
        raise MigrationError(errors)
    ctx = Context(report=report, catalog=options.catalog, tolerations=options.tolerations)
    if options.strategy == "claims":
        pending = _migrate_claims(ctx, parsed)
        if ctx.errors:
            raise MigrationError(ctx.errors)
        for stream in parsed:
            _insert_templates(stream, [p for p in pending if any(p.document is d for d in stream.documents)])
    else:
        _migrate_extended(ctx, parsed)
    results = []
    for stream, (source, text) in zip(parsed, inputs):
        touched = any(d.changed or d.generated for d in stream.documents)
        results.append(FileResult(source, text, streams.render(stream) if touched else text))
    report.changed_files = [r.source for r in results if r.changed]
    return results, report
