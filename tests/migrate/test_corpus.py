"""Properties every corpus file must keep: parseable output, idempotency, comments, untouched documents."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrate_testlib import CORPUS as corpus, GOOD, base_name, by_kind, docs, is_toleration_note, objects, run
from dra_driver.migrate import Action
from dra_driver.migrate.resources import classify
from dra_driver.sources.workloads import pod_spec

DEVICE_PREFIXES = ("nvidia.com/", "amd.com/", "habana.ai/")


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_output_parses_and_is_idempotent(path: Path) -> None:
    text = path.read_text()
    first, _ = run(text, path.name)
    docs(first.output)  # parses
    second, report = run(first.output, path.name)
    assert second.output == first.output
    assert not second.changed
    assert report.changed_files == []


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_every_comment_survives(path: Path) -> None:
    text = path.read_text()
    result, _ = run(text, path.name)
    out_lines = {line.strip() for line in result.output.splitlines()}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            assert stripped in out_lines, f"comment lost: {stripped}"


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_converted_pods_reference_their_template(path: Path) -> None:
    result, report = run(path.read_text(), path.name)
    templates = {t["metadata"]["name"]: t for t in by_kind(result.output, "ResourceClaimTemplate")}
    for obj in objects(result.output):
        spec = pod_spec(obj)
        if spec is None:
            continue
        claims = {c["name"]: c for c in spec.get("resourceClaims") or []}
        for container in (spec.get("initContainers") or []) + spec["containers"]:
            refs = (container.get("resources") or {}).get("claims") or []
            for ref in refs:
                template = templates[claims[ref["name"]]["resourceClaimTemplateName"]]
                names = [r["name"] for r in template["spec"]["spec"]["devices"]["requests"]]
                assert ref.get("request", names[0]) in names
                if len(names) > 1:
                    assert "request" in ref  # without it the container would get every device of the claim
            limits = (container.get("resources") or {}).get("limits") or {}
            converted = [r for r in limits if not isinstance(classify(r), type(None)) and refs]
            assert not [r for r in converted if str(r).startswith(DEVICE_PREFIXES) and not str(r).endswith(".shared")]


def test_untouched_documents_are_byte_identical() -> None:
    text = (corpus / "helm-rendered.yaml").read_text()
    result, _ = run(text)
    chunks = text.split("---\n")
    for chunk in chunks:
        if "release-triton\n  labels" in chunk and "kind: Deployment" in chunk:
            assert chunk not in result.output  # the GPU deployment changed
        elif chunk.strip():
            assert chunk in result.output
    assert result.output.count("# Source: triton/templates/deployment.yaml") == 2  # workload + its template


def test_helm_stream_keeps_document_order_and_separators() -> None:
    result, _ = run((corpus / "helm-rendered.yaml").read_text())
    kinds = [d["kind"] for d in docs(result.output)]
    assert kinds == ["ServiceAccount", "ConfigMap", "Service", "ResourceClaimTemplate", "Deployment", "Deployment"]
    assert result.output.startswith("---\n# Source: triton/templates/serviceaccount.yaml\n")


def test_operator_pod_templates_are_converted_with_a_note_on_what_to_check() -> None:
    result, report = run((corpus / "custom-operators.yaml").read_text())
    generated = {base_name(f.subject.split("/", 1)[1]) for f in report.by_action(Action.GENERATED)}
    assert generated == {"bert-ddp-master-accelerators", "bert-ddp-worker-accelerators",
                         "ray-gpu-gpu-workers-accelerators", "nccl-tests-worker-accelerators"}
    notes = {f.subject: f.reason for f in report.by_action(Action.NOTE) if not is_toleration_note(f)}
    assert set(notes) == {"PyTorchJob", "RayCluster", "MPIJob", "num-gpus"}
    assert "num-gpus" in notes["RayCluster"]  # KubeRay counts GPUs from limits: the user must set it
    jobs = {o["kind"]: o for o in objects(result.output)}
    master = jobs["PyTorchJob"]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert master["containers"][0]["resources"] == {"claims": [{"name": "accelerators"}]}
    assert base_name(master["resourceClaims"][0]["resourceClaimTemplateName"]) == "bert-ddp-master-accelerators"


def test_kinds_without_a_place_for_claims_are_reported_and_never_changed() -> None:
    text = (corpus / "unconvertible.yaml").read_text()
    result, report = run(text)
    assert result.output == text
    reasons = {f.where.obj.split("/")[0]: f.reason for f in report.by_action(Action.NOT_CONVERTED)}
    assert set(reasons) == {"InferenceService", "Workflow", "NotebookServer"}
    assert "Knative" in reasons["InferenceService"] and "podSpecPatch" in reasons["Workflow"]
    assert "not a workload this tool knows" in reasons["NotebookServer"]


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.name)
def test_containers_running_together_never_share_a_request(path: Path) -> None:
    """App containers and sidecars each keep their own devices (aliases resolved, as the API server reads them)."""
    result, _ = run(path.read_text(), path.name)
    for obj in objects(result.output):
        spec = pod_spec(obj)
        if spec is None:
            continue
        concurrent = list(spec.get("containers") or []) + [
            c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
        seen: set[tuple[str, str]] = set()
        for container in concurrent:
            refs = {(r["name"], r.get("request", "")) for r in (container.get("resources") or {}).get("claims") or []}
            assert not refs & seen, f"{container['name']} shares {refs & seen}"
            seen |= refs


def test_the_documented_before_and_after_is_what_the_tool_writes() -> None:
    """docs/migration.md shows the migrated inference Deployment: it must be the output, line for line."""
    doc = (Path(__file__).parents[2] / "docs" / "migration.md").read_text()
    after = doc.split("After (`dra-driver migrate inference-deployment.yaml`", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    result, _ = run((corpus / "inference-deployment.yaml").read_text())
    assert result.output == after
