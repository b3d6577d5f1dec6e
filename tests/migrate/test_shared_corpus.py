"""`migrate` over every manifest of the shared corpus of real-world files (../shared/migrate-corpus).

Each file is migrated once, in process, and checked for: strictly schema-valid
objects (kubernetes-validate, 1.35), the same number of devices for every
container, idempotency, original lines changed only inside the blocks the tool
edits, and the results that used to be wrong (MIG single strategy, time-sliced
GPUs, operator resources, many files at once).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from ruamel.yaml import YAML

from migrate_testlib import base_name
from shared_corpus import SKIP_REASON, manifests, require
from dra_driver.migrate import Action, FileResult, MigrationError, Options, Report, load_catalog, migrate
from dra_driver.migrate.counts import device_count
from dra_driver.backend.vocabulary import VENDOR_DOMAINS
from dra_driver.sources.operators import ray_group
from dra_driver.sources.workloads import objects as document_objects, workloads

FILES = manifests()
K8S_VERSION = "1.35"
EDITED_POD_KEYS = ("nodeSelector", "affinity", "resourceClaims")
OPERATOR_KINDS_IN_CORPUS = {"PyTorchJob", "TFJob", "PaddleJob", "MPIJob", "RayCluster", "RayJob", "RayService",
                            "LeaderWorkerSet", "InferenceService", "LLMInferenceService"}


@functools.cache
def _catalog() -> Any:
    return load_catalog()


def _parses(text: str) -> bool:
    try:
        list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        return False
    return True


INVALID = [p for p in FILES if not _parses(p.read_text())]  # upstream files that are not YAML at all
VALID = [p for p in FILES if p not in INVALID]
_parametrize = pytest.mark.parametrize("path", VALID or [pytest.param(None, marks=pytest.mark.skip(reason=SKIP_REASON))],
                                       ids=lambda p: p.name if p else "none")


@functools.cache
def _migrated(path: Path) -> tuple[FileResult, Report]:
    [result], report = migrate([(path.name, path.read_text())], Options(catalog=_catalog()))
    return result, report


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_upstream_yaml_is_refused_with_its_file_line(path: Path) -> None:
    with pytest.raises(MigrationError, match=rf"{path.name}: document \d+: invalid YAML at line \d+, column \d+"):
        migrate([(path.name, path.read_text())], Options(catalog=_catalog()))


def _objects(text: str) -> list[dict[str, Any]]:
    return [obj for doc in yaml.safe_load_all(text) for _, obj in document_objects(doc) if obj]


def _pod_specs(obj: Mapping[str, Any]) -> list[Any]:
    return [w.pod_spec for w in workloads(obj, "") or []]


def _is_device(resource: str) -> bool:
    return resource.split("/", 1)[0] in VENDOR_DOMAINS


def _devices_per_container(text: str) -> list[int]:
    """Devices each container of each pod spec gets: device-plugin limits plus the claim requests it uses."""
    objs = _objects(text)
    templates = {o["metadata"]["name"]: o for o in objs if o.get("kind") == "ResourceClaimTemplate"}
    counts = []
    for obj in objs:
        if obj.get("kind") == "ResourceClaimTemplate":
            continue
        for spec in _pod_specs(obj):
            claims = {c["name"]: c.get("resourceClaimTemplateName") for c in spec.get("resourceClaims") or []}
            for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
                resources = container.get("resources") or {}
                total = sum(device_count(v) or 0 for r, v in (resources.get("limits") or {}).items() if _is_device(str(r)))
                for ref in resources.get("claims") or []:
                    template = templates.get(claims.get(ref["name"]) or "")
                    requests = template["spec"]["spec"]["devices"]["requests"] if template else []
                    total += sum((r.get("exactly") or {}).get("count", 1) for r in requests if ref.get("request", r["name"]) == r["name"])
                counts.append(total)
    return counts


def _validatable(text: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Objects the 1.35 schemas know, and the pod specs of operator resources wrapped in a Pod."""
    for obj in _objects(text):
        name = f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"
        if "." not in str(obj.get("apiVersion", "")).split("/")[0] or obj.get("apiVersion", "").startswith(("apps/", "batch/", "resource.k8s.io/")):
            yield name, obj
        elif workloads(obj, ""):
            for index, spec in enumerate(_pod_specs(obj)):
                yield f"{name} pod spec {index}", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": spec}


def _schema_problems(items: dict[str, dict[str, Any]], validate: Any, error: type[Exception]) -> dict[str, str]:
    problems = {}
    for name, obj in items.items():
        try:
            validate(obj, K8S_VERSION, strict=True)
        except error as exc:
            problems[name] = str(getattr(exc, "message", exc))
    return problems


@_parametrize
def test_output_is_schema_valid(path: Path) -> None:
    """Every object the migration changed or added is valid where the original was (unchanged ones are skipped: slow)."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed (test extra)")
    result, _ = _migrated(path)
    if not result.changed:
        return
    errors = (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError)
    before = dict(_validatable(result.original))
    after = {name: obj for name, obj in _validatable(result.output) if before.get(name) != obj}
    assert after  # the file changed, so something must be checked
    invalid_before = _schema_problems({n: before[n] for n in after if n in before}, kubernetes_validate.validate, errors)
    problems = _schema_problems(after, kubernetes_validate.validate, errors)
    new = {name: problem for name, problem in problems.items() if name not in invalid_before}
    assert not new, new


@_parametrize
def test_every_container_keeps_its_device_count(path: Path) -> None:
    result, _ = _migrated(path)
    assert _devices_per_container(result.output) == _devices_per_container(result.original)


@_parametrize
def test_idempotent(path: Path) -> None:
    result, _ = _migrated(path)
    [again], report = migrate([(path.name, result.output)], Options(catalog=_catalog()))
    assert again.output == result.output and not report.changed_files


def _block_lines(lines: list[str], mapping: Any, key: str) -> range:
    """The lines of `key: value` in `mapping` (ruamel data): its line, and the lines indented below it."""
    start, column = mapping.lc.key(key)
    end = start + 1
    while end < len(lines):
        text = lines[end]
        indent = len(text) - len(text.lstrip(" "))
        if text.strip() and not text.lstrip().startswith("#") and indent < column:
            break
        if text.strip() and indent == column and not text.lstrip().startswith(("- ", "#")):
            break
        end += 1
    return range(start, end)


def _editable_lines(text: str) -> set[int]:
    """Lines of the original the tool may change: containers' `resources`, the pod placement blocks, Ray's start params."""
    lines = text.splitlines()
    allowed: set[int] = set()
    for doc in YAML(typ="rt").load_all(text):
        for _, obj in document_objects(doc):
            for pod in workloads(obj, "") or []:
                spec = pod.pod_spec
                places = [(spec, key) for key in EDITED_POD_KEYS if key in spec]
                group = ray_group(obj, pod.spec_keys)
                if group is not None and "rayStartParams" in group:  # num-gpus, which KubeRay took from the limits
                    places.append((group, "rayStartParams"))
                for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
                    if isinstance(container, Mapping) and "resources" in container:
                        places.append((container, "resources"))
                for mapping, key in places:
                    allowed.update(_block_lines(lines, mapping, key))
    return allowed


@_parametrize
def test_lines_outside_the_edited_blocks_are_byte_identical(path: Path) -> None:
    result, _ = _migrated(path)
    before, after = result.original.splitlines(), result.output.splitlines()
    allowed = _editable_lines(result.original)
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    changed = [i for tag, i1, i2, _, _ in matcher.get_opcodes() if tag in ("replace", "delete") for i in range(i1, i2)]
    outside = [f"{i + 1}: {before[i]}" for i in changed if i not in allowed]
    assert not outside, "\n".join(outside)


def _named(suffix: str) -> Path:
    root = require()
    [path] = [p for p in manifests() if p.name.endswith(suffix)] or [root / suffix]
    return path


def test_mig_single_strategy_pod_asks_for_one_mig_device() -> None:
    result, report = _migrated(_named("gpu-usage_mig-single.yml"))
    [template] = [o for o in _objects(result.output) if o["kind"] == "ResourceClaimTemplate"]
    [request] = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "mig-1g.5gb.nvidia.com" and request["exactly"]["count"] == 1
    assert any("MIG single-strategy" in f.reason for f in report.by_action(Action.NOTE))


def test_time_sliced_deployment_is_never_made_exclusive() -> None:
    result, report = _migrated(_named("NVIDIA_gpu-operator__tests_plugin-test.yaml"))
    assert not result.changed
    assert any(f.subject == "nvidia.com/gpu" and "time-sliced" in f.reason for f in report.by_action(Action.NOT_CONVERTED))


def test_operator_resources_are_converted_or_reported_with_their_own_reason() -> None:
    require()
    seen: set[str] = set()
    converted: set[str] = set()
    for path in VALID:
        result, report = _migrated(path)
        kinds = {str(o.get("kind")) for o in _objects(result.original)} & OPERATOR_KINDS_IN_CORPUS
        seen |= kinds
        converted |= {f.subject for f in report.by_action(Action.NOTE) if f.subject in kinds}
        unknown = [f for f in report.by_action(Action.NOT_CONVERTED) if "not a workload this tool knows" in f.reason]
        assert not [f for f in unknown if f.where.obj.split("/")[0] in OPERATOR_KINDS_IN_CORPUS]
    assert seen == OPERATOR_KINDS_IN_CORPUS
    assert seen - converted == {"InferenceService"}  # KServe's predictor cannot carry claims: reported instead


def test_all_files_at_once_are_each_migrated_on_their_own() -> None:
    """-w over a folder of alternatives (several define the same workload name) must not refuse."""
    require()
    by_name: dict[str, list[Path]] = {}
    for path in VALID:
        for obj in _objects(_migrated(path)[0].output):
            if obj["kind"] == "ResourceClaimTemplate":
                by_name.setdefault(base_name(obj["metadata"]["name"]), []).append(path)
    alternatives = sorted({p for paths in by_name.values() if len(paths) > 1 for p in paths})
    assert len(alternatives) >= 2  # the corpus has alternatives of one workload in separate files
    results, _ = migrate([(p.name, p.read_text()) for p in alternatives], Options(catalog=_catalog()))
    assert [r.output for r in results] == [_migrated(p)[0].output for p in alternatives]
