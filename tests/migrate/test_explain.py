"""Every generated ResourceClaimTemplate is allocatable on a simulated fleet of the hardware it was written for."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from migrate_testlib import CORPUS, base_name, by_kind, run

from dra_driver.cli.main import main  # noqa: E402

# template -> (hardware profile, partitioning) it must be allocatable on
FLEETS = {
    "llama-pretrain-accelerators": ("dgx-h100", "static"),
    "llm-serving-accelerators": ("dgx-h100", "dynamic"),  # whole H100 + a 1g.10gb MIG device
    "nightly-eval-accelerators": ("dgx-h100", "static"),
    "release-triton-accelerators": ("dgx-h100", "static"),
    "notebook-small-accelerators": ("dgx-h100", "dynamic"),
    "rocm-train-accelerators": ("mi300x", "static"),
    "cpx-inference-accelerators": ("mi300x-cpx", "static"),
    "gaudi-finetune-accelerators": ("gaudi2-hls", "static"),
    "vector-db-accelerators": ("dgx-h100", "static"),
    "whisper-accelerators": ("l4", "static"),
    "odd-requests-accelerators": ("t4", "static"),
    "trainer-accelerators": ("dgx-h100", "static"),  # anchors.yaml: two containers of one aliased resources map
    "mixed-accelerators": ("dgx-h100", "dynamic"),  # whole GPU + 2 MIG slices in one container (mixed strategy)
    "bert-ddp-master-accelerators": ("dgx-h100", "static"),  # operator resources: one template per pod template
    "bert-ddp-worker-accelerators": ("dgx-h100", "static"),
    "ray-gpu-gpu-workers-accelerators": ("dgx-h100", "static"),
    "nccl-tests-worker-accelerators": ("dgx-h100", "static"),
}
# Profiles no shipped hardware profile offers: the template is generated but cannot be allocated anywhere here.
NO_FLEET = {"odd-profile-accelerators": "MIG profile 2g.24gb exists on no simulated GPU"}


def _templates() -> list[dict]:
    found = []
    for path in sorted(CORPUS.glob("*.yaml")):
        result, _ = run(path.read_text(), path.name)
        found.extend(by_kind(result.output, "ResourceClaimTemplate"))
    for template in found:  # keyed without the spec digest, which any change of a request changes
        template["metadata"]["name"] = base_name(template["metadata"]["name"])
    return found


TEMPLATES = _templates()


def test_every_generated_template_has_a_fleet() -> None:
    assert {t["metadata"]["name"] for t in TEMPLATES} == set(FLEETS) | set(NO_FLEET)


@pytest.mark.parametrize("template", [t for t in TEMPLATES if t["metadata"]["name"] in FLEETS], ids=lambda t: t["metadata"]["name"])
def test_template_is_allocatable(template: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile, partitioning = FLEETS[template["metadata"]["name"]]
    path = tmp_path / "template.yaml"
    path.write_text(yaml.safe_dump(template))
    code = main(["explain", str(path), "--profile", profile, "--partitioning", partitioning])
    out, err = capsys.readouterr()
    assert code == 0, out + err


def test_product_selector_really_restricts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [template] = [t for t in TEMPLATES if t["metadata"]["name"] == "llama-pretrain-accelerators"]
    path = tmp_path / "template.yaml"
    path.write_text(yaml.safe_dump(template))
    assert main(["explain", str(path), "--profile", "h200"]) == 1  # H200 nodes do not match the H100 product label
    capsys.readouterr()
