"""A kustomization directory, migrated so that what `kubectl kustomize` renders asks for no device-plugin resource.

The resources (files, and the resources of the kustomizations it includes) are
migrated like any manifest. A strategic-merge patch is *not* a workload: it
only changes its target, so rewriting it on its own either breaks the render
or lets it put `nvidia.com/gpu` back on the migrated base. For each patch that
sets device resources we:
1. merge its device entries into a copy of the *original* target (containers
   matched by name, as strategic merge does) and migrate that copy: this is the
   workload the overlay really renders, with the patch's device counts;
2. take the device entries out of the patch, and make it set what the migrated
   copy has instead: each container's `resources.claims` (replaced as a whole by
   strategic merge) and the pod's `resourceClaims` entry (merged by name, so it
   points the rendered pod at the overlay's template);
3. add the overlay's templates to `dra-resourceclaimtemplates.yaml` next to the
   kustomization, listed under its `resources`.
Kustomize features this cannot follow (remote resources, inline or JSON 6902
patches) are reported with "render first".
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml.comments import CommentedMap

from dra_driver.common.errors import FieldError
from dra_driver.migrate import stream as streams
from dra_driver.migrate.claims import POD_CLAIM
from dra_driver.migrate.edit import remove_key, to_ruamel
from dra_driver.migrate.engine import FileResult, Options, migrate
from dra_driver.migrate.report import Action, Location, MigrationError, Report
from dra_driver.backend.vocabulary import VENDOR_DOMAINS
from dra_driver.migrate.resources import classify
from dra_driver.migrate.tolerations import add_missing as add_tolerations, admission_toleration
from dra_driver.sources.workloads import Workload, metadata, objects, workloads

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
TEMPLATES_FILE = "dra-resourceclaimtemplates.yaml"
RENDER_FIRST = "render first (`kubectl kustomize DIR | dra-driver migrate -`) to see and migrate the result"


def kustomization_file(directory: Path) -> Path | None:
    for name in KUSTOMIZATION_FILES:
        if (directory / name).is_file():
            return directory / name
    return None


@dataclass(frozen=True)
class Patch:
    path: Path
    kind: str | None  # from the patch's `target`, when it has one
    name: str | None


@dataclass
class Tree:
    resources: list[Path] = field(default_factory=list)  # manifest files, each once
    patches: dict[Path, list[Patch]] = field(default_factory=dict)  # kustomization file -> its patch files
    skipped: list[tuple[Path, str, str]] = field(default_factory=list)  # (kustomization, entry, why)


Reader = Callable[[Path], str]  # the CLI passes its input-layer check; tests and library callers may use Path.read_text


def _read_text(path: Path) -> str:
    return path.read_text()


def _entry_path(kustomization: Path, entry: Any, field_name: str) -> Path:
    """A file named by the kustomization: relative to it, as kustomize reads it (which may be outside it, `../base`)."""
    if not isinstance(entry, str) or not entry or "\n" in entry or "\0" in entry or Path(entry).is_absolute():
        raise MigrationError([FieldError(f"{kustomization}: {field_name}",
                                         f"{entry!r} is not a relative path; kustomize entries are relative to the "
                                         "kustomization's directory")])
    return (kustomization.parent / entry).resolve()


def _remote(entry: str) -> bool:
    return "://" in entry or entry.startswith(("github.com/", "git@", "ssh:"))


def _collect(kustomization: Path, tree: Tree, seen: set[Path], read: Reader) -> None:
    if kustomization in seen:
        return
    seen.add(kustomization)
    spec = yaml.safe_load(read(kustomization)) or {}
    if not isinstance(spec, Mapping):
        raise MigrationError([FieldError(str(kustomization), "is not a YAML mapping (a Kustomization)")])
    for field_name in ("resources", "bases", "components"):
        for entry in spec.get(field_name) or []:
            if isinstance(entry, str) and _remote(entry):
                tree.skipped.append((kustomization, entry, f"remote {field_name} entry; {RENDER_FIRST}"))
                continue
            path = _entry_path(kustomization, entry, field_name)
            nested = kustomization_file(path) if path.is_dir() else None
            if nested is not None:
                _collect(nested, tree, seen, read)
            elif path.is_file():
                if path not in tree.resources:
                    tree.resources.append(path)
            else:
                raise MigrationError([FieldError(f"{kustomization}: {field_name}", f"{entry!r}: no such file or kustomization")])
    patches = tree.patches.setdefault(kustomization, [])
    for entry in spec.get("patches") or []:
        if not isinstance(entry, Mapping) or not entry.get("path"):
            tree.skipped.append((kustomization, "patches", f"inline patch (no path): {RENDER_FIRST}"))
            continue
        given = entry.get("target")
        target = given if isinstance(given, Mapping) else {}
        patches.append(Patch(_entry_path(kustomization, entry["path"], "patches"), target.get("kind"), target.get("name")))
    for entry in spec.get("patchesStrategicMerge") or []:
        if isinstance(entry, str) and "\n" in entry:
            tree.skipped.append((kustomization, "patchesStrategicMerge", f"inline patch: {RENDER_FIRST}"))
            continue
        patches.append(Patch(_entry_path(kustomization, entry, "patchesStrategicMerge"), None, None))
    for renaming in ("namePrefix", "nameSuffix"):
        if spec.get(renaming):
            tree.skipped.append((kustomization, renaming, (
                f"{renaming} renames the ResourceClaimTemplates, but kustomize does not update resourceClaimTemplateName "
                "references (it has no name reference for that field): add a `configurations:` file with a "
                "nameReference for kind ResourceClaimTemplate (docs/migration.md, 'Kustomize and Helm')")))
    if spec.get("patchesJson6902"):
        tree.skipped.append((kustomization, "patchesJson6902",
                             f"JSON 6902 patches are not followed (they may set device resources); {RENDER_FIRST}"))


def load_tree(directory: Path, read: Reader = _read_text) -> Tree:
    kustomization = kustomization_file(directory)
    if kustomization is None:
        raise MigrationError([FieldError(str(directory), f"a directory needs one of {', '.join(KUSTOMIZATION_FILES)}; "
                                                         "pass manifest files instead")])
    tree = Tree()
    _collect(kustomization.resolve(), tree, set(), read)
    return tree


def _is_device(resource: Any) -> bool:
    return classify(str(resource)) is not None


def _device_entries(container: Mapping[str, Any]) -> dict[str, dict[Any, Any]]:
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return {}
    found = {}
    for part in ("limits", "requests"):
        values = resources.get(part)
        if isinstance(values, Mapping) and any(_is_device(r) for r in values):
            found[part] = {r: v for r, v in values.items() if _is_device(r)}
    return found


def _containers(pod_spec: Mapping[str, Any]) -> list[tuple[str, MutableMapping[str, Any]]]:
    return [(key, c) for key in ("initContainers", "containers") for c in pod_spec.get(key) or [] if isinstance(c, MutableMapping)]


def _at(node: Any, keys: tuple[str | int, ...]) -> Any:
    for key in keys:
        node = node[key]
    return node


def _merge_devices(base: CommentedMap, patch_pod: Workload) -> None:
    """Strategic merge of the patch's device entries into `base` (a copy)."""
    spec = _at(base, patch_pod.spec_keys)
    for list_key, container in _containers(patch_pod.pod_spec):
        entries = _device_entries(container)
        if not entries:
            continue
        targets = [c for c in spec.setdefault(list_key, []) if isinstance(c, MutableMapping) and c.get("name") == container.get("name")]
        if not targets:
            spec[list_key].append(copy.deepcopy(container))
            continue
        resources = targets[0].setdefault("resources", CommentedMap())
        for part, values in entries.items():
            merged = resources.setdefault(part, CommentedMap())
            for resource, value in values.items():
                if value is None:
                    merged.pop(resource, None)  # `key: null` deletes in a strategic merge
                else:
                    merged[resource] = value


def _find_target(bases: list[Any], kind: str, name: str) -> Any | None:
    for obj in bases:
        if obj.get("kind") == kind and metadata(obj)[0] == name:
            return obj
    return None


def _patch_tolerations(patch_pod: Workload, migrated_spec: Mapping[str, Any], base_spec: Any) -> None:
    """The admission tolerations the migrated copy got, where the rendered pod would otherwise lack them.

    Strategic merge replaces `tolerations` as a whole. A patch with its own list gets the missing ones added;
    without one, the rendered pod has the base's list, which the base's own migration completes only for
    the resources the base itself requests: for others the patch takes the copy's whole list.
    """
    wanted = migrated_spec.get("tolerations")
    wanted = wanted if isinstance(wanted, list) else []
    added = [str(t["key"]) for t in wanted if isinstance(t, Mapping) and dict(t) == admission_toleration(str(t.get("key")))]
    if not added:
        return
    if isinstance(patch_pod.pod_spec.get("tolerations"), list):
        add_tolerations(patch_pod.pod_spec, added)
        return
    base_resources = {str(r) for _, c in _containers(base_spec if isinstance(base_spec, Mapping) else {})
                      for values in _device_entries(c).values() for r in values}
    if any(resource not in base_resources for resource in added):
        patch_pod.pod_spec["tolerations"] = to_ruamel(copy.deepcopy(list(wanted)))


def _rewrite_patch(patch_pod: Workload, migrated: Mapping[str, Any], base: Any) -> None:
    """The device entries the migration converted out of the patch; the migrated copy's claims in.

    An entry the migration left alone (`nvidia.com/gpu.shared`, a placeholder count) stays in the patch.
    """
    migrated_spec = _at(migrated, patch_pod.spec_keys)
    by_name = {c.get("name"): c for _, c in _containers(migrated_spec)}
    for _, container in _containers(patch_pod.pod_spec):
        if not _device_entries(container):
            continue
        resources = container["resources"]
        kept: Mapping[str, Any] = (by_name.get(container.get("name")) or {}).get("resources") or {}
        for part in ("limits", "requests"):
            values = resources.get(part)
            if isinstance(values, CommentedMap):
                for resource in [r for r in values if _is_device(r) and r not in (kept.get(part) or {})]:
                    remove_key(values, resource)
                if not values:
                    remove_key(resources, part)
        claims = (by_name.get(container.get("name")) or {}).get("resources", {}).get("claims")
        if claims:
            resources["claims"] = to_ruamel(copy.deepcopy(list(claims)))
    _patch_tolerations(patch_pod, migrated_spec, _at(base, patch_pod.spec_keys))
    entries = [e for e in migrated_spec.get("resourceClaims") or [] if e.get("name") == POD_CLAIM]
    if entries:
        existing = [e for e in patch_pod.pod_spec.get("resourceClaims") or [] if e.get("name") != POD_CLAIM]
        patch_pod.pod_spec["resourceClaims"] = to_ruamel(existing + entries)


@dataclass
class _Overlay:
    kustomization: Path
    read: Reader
    templates: list[Any] = field(default_factory=list)
    results: list[FileResult] = field(default_factory=list)


def _migrate_patch(patch: Patch, bases: list[Any], options: Options, report: Report, overlay: _Overlay) -> None:
    text = overlay.read(patch.path)
    stream = streams.split(text, str(patch.path))
    for index, document in enumerate(stream.documents):
        if isinstance(document.data, list) and any(d.replace("~1", "/") in document.body for d in VENDOR_DOMAINS):
            report.add(Action.NOT_CONVERTED, Location(str(patch.path), index + 1), "patch",
                       f"a JSON 6902 patch that names device resources; {RENDER_FIRST}", remains=True)
            continue
        for prefix, obj in objects(document.data):
            pods = workloads(obj, prefix) or []
            if not any(_device_entries(c) for pod in pods for _, c in _containers(pod.pod_spec)):
                continue
            kind, name = patch.kind or str(obj.get("kind")), patch.name or metadata(obj)[0]
            where = Location(str(patch.path), index + 1, f"{kind}/{name}")
            base = _find_target(bases, kind, name)
            if base is None:
                report.add(Action.NOT_CONVERTED, where, "patch",
                           f"sets device resources on {kind}/{name}, which is not among the kustomization's resources; "
                           f"{RENDER_FIRST}", remains=True)
                continue
            merged = copy.deepcopy(base)
            for pod in pods:
                _merge_devices(merged, pod)
            [result], sub_report = migrate([(str(patch.path), streams.dump(merged, document.indent))], options)
            rendered = [o for d in yaml.safe_load_all(result.output) for _, o in objects(d) if o]
            migrated = next(o for o in rendered if o.get("kind") == kind and metadata(o)[0] == name)
            for pod in pods:
                _rewrite_patch(pod, migrated, base)
            document.changed = True
            overlay.templates.extend(o for o in rendered if o.get("kind") == "ResourceClaimTemplate")
            for finding in sub_report.by_action(Action.GENERATED):
                report.add(Action.GENERATED, where, finding.subject,
                           f"for this strategic-merge patch: {kind}/{name} as the overlay renders it (the patch's device "
                           f"counts), written to {TEMPLATES_FILE}; the patch now sets the claims instead")
            for finding in sub_report.by_action(Action.NOT_CONVERTED):  # what stays in the patch, and why
                report.add(Action.NOT_CONVERTED, where, finding.subject, f"{finding.reason} (with this patch applied)",
                           remains=finding.remains)
    changed = any(d.changed for d in stream.documents)
    overlay.results.append(FileResult(str(patch.path), text, streams.render(stream) if changed else text))


def _names(texts: list[str], kind: str) -> set[str]:
    return {metadata(o)[0] for text in texts for d in yaml.safe_load_all(text) for _, o in objects(d)
            if isinstance(o, Mapping) and o.get("kind") == kind}


def _templates_result(overlay: _Overlay, rendered: set[str]) -> FileResult:
    """TEMPLATES_FILE with the overlay's templates that the render does not have yet (`rendered`: the bases')."""
    path = overlay.kustomization.parent / TEMPLATES_FILE
    original = overlay.read(path) if path.is_file() else ""
    present = _names([original], "ResourceClaimTemplate") | rendered  # a second copy would fail the render
    text = original
    for template in overlay.templates:
        if metadata(template)[0] in present:
            continue
        present.add(metadata(template)[0])
        if text and not text.endswith("\n"):
            text += "\n"
        text += ("---\n" if text else "") + streams.dump(to_ruamel(template), (2, 2, 0))
    return FileResult(str(path), original, text)


def _kustomization_result(overlay: _Overlay) -> FileResult:
    """The kustomization with TEMPLATES_FILE listed under `resources` (unchanged when it already is)."""
    kustomization = overlay.kustomization
    text = overlay.read(kustomization)
    stream = streams.split(text, str(kustomization))
    data = stream.documents[0].data if stream.documents else None
    if not isinstance(data, CommentedMap) or TEMPLATES_FILE in (data.get("resources") or []):
        return FileResult(str(kustomization), text, text)
    if isinstance(data.get("resources"), list):
        data["resources"].append(TEMPLATES_FILE)
    else:
        data["resources"] = to_ruamel([TEMPLATES_FILE])
    stream.documents[0].changed = True
    return FileResult(str(kustomization), text, streams.render(stream))


def migrate_directory(directory: Path, options: Options, read: Reader = _read_text) -> tuple[list[FileResult], Report]:
    """Migrate a kustomization directory: its resources, and its patches consistently with them."""
    tree = load_tree(directory, read)
    originals = [(str(path), read(path)) for path in tree.resources]
    results, report = migrate(originals, options)
    for kustomization, entry, why in tree.skipped:
        report.add(Action.NOT_CONVERTED, Location(str(kustomization), None), entry, why)
    if options.strategy != "claims":
        return results, report
    bases = [obj for source, text in originals for d in streams.split(text, source).documents
             for _, obj in objects(d.data) if isinstance(obj, CommentedMap)]
    from_bases = _names([result.output for result in results], "ResourceClaimTemplate")
    for kustomization, patches in tree.patches.items():
        overlay = _Overlay(kustomization, read)
        for patch in patches:
            _migrate_patch(patch, bases, options, report, overlay)
        results.extend(overlay.results)
        templates = _templates_result(overlay, from_bases)
        if templates.changed:
            results += [templates, _kustomization_result(overlay)]
    report.changed_files = [r.source for r in results if r.changed]
    return results, report
