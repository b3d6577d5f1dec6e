"""YAML anchors, aliases and merge keys: each container keeps its own devices, nothing else changes."""

from __future__ import annotations

from typing import Any

import pytest

from migrate_testlib import CORPUS, base_name, by_kind, docs, run
from dra_driver.migrate import Action, MigrationError

SHARED_RESOURCES = """\
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: train
    image: y
    resources: &res
      limits:
        nvidia.com/gpu: 2
        cpu: "4"
  - name: side
    image: z
    resources: *res
"""


def _containers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in obj["spec"]["template"]["spec"]["containers"]}


def _requests(container: dict[str, Any]) -> list[str]:
    return [c.get("request", "") for c in container["resources"].get("claims", [])]


def test_shared_resources_alias_gives_each_container_only_its_own_request() -> None:
    result, report = run(SHARED_RESOURCES)
    pod = by_kind(result.output, "Pod")[0]  # safe_load resolves aliases, as the API server does
    train, side = pod["spec"]["containers"]
    assert _requests(train) == ["train-gpu"] and _requests(side) == ["side-gpu"]
    assert train["resources"]["limits"] == {"cpu": "4"} == side["resources"]["limits"]
    notes = [f for f in report.by_action(Action.NOTE) if f.subject == "&res"]
    assert notes and notes[0].where.path == "spec.containers[0].resources"


def test_anchored_corpus_file_keeps_every_alias_content() -> None:
    result, _ = run((CORPUS / "anchors.yaml").read_text())
    trainer, loader = by_kind(result.output, "Deployment")
    train, evaluate = _containers(trainer)["train"], _containers(trainer)["eval"]
    assert _requests(train) == ["train-gpu"] and _requests(evaluate) == ["eval-gpu"]
    # limits and requests were one aliased map: the device leaves both, cpu stays in both
    for container in (train, evaluate):
        assert container["resources"]["limits"] == {"cpu": "8"} == container["resources"]["requests"]
    # the GPU label moved onto the trainer's requests; the CPU loader shares the anchored selector and keeps it whole
    assert trainer["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "training"}
    assert loader["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "pool": "training"}
    requests = by_kind(result.output, "ResourceClaimTemplate")[0]["spec"]["spec"]["devices"]["requests"]
    assert all(r["exactly"]["selectors"] for r in requests)


def test_anchored_scalar_count_is_converted_everywhere() -> None:
    text = SHARED_RESOURCES.replace("resources: &res\n", "resources:\n").replace(
        "nvidia.com/gpu: 2", "nvidia.com/gpu: &n 2").replace("    resources: *res\n", "    resources: {limits: {nvidia.com/gpu: *n}}\n")
    result, _ = run(text)
    train, side = by_kind(result.output, "Pod")[0]["spec"]["containers"]
    assert _requests(train) == ["train-gpu"] and _requests(side) == ["side-gpu"]
    template = by_kind(result.output, "ResourceClaimTemplate")[0]
    assert [r["exactly"]["count"] for r in template["spec"]["spec"]["devices"]["requests"]] == [2, 2]


def test_aliased_pod_template_shared_by_two_workloads_is_migrated_for_each() -> None:
    text = """\
apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: a}
  spec:
    template: &tpl
      spec:
        containers:
        - name: c
          image: x
          resources: {limits: {nvidia.com/gpu: 1}}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: b}
  spec:
    template: *tpl
"""
    result, _ = run(text)
    first, second = by_kind(result.output, "Deployment")
    [[first_claim], [second_claim]] = [d["spec"]["template"]["spec"]["resourceClaims"] for d in (first, second)]
    assert first_claim["name"] == second_claim["name"] == "accelerators"
    assert base_name(first_claim["resourceClaimTemplateName"]) == "a-accelerators"
    assert base_name(second_claim["resourceClaimTemplateName"]) == "b-accelerators"
    again, _ = run(result.output)
    assert again.output == result.output


def test_merge_key_on_an_edited_container_is_refused_naming_anchor_and_path() -> None:
    with pytest.raises(MigrationError) as caught:
        run((CORPUS / "refuse" / "merge-key.yaml").read_text(), "merge.yaml")
    message = str(caught.value)
    # container a is merged into b, which inherits a's resources map: both would change
    assert "spec.containers[0].resources" in message and "spec.containers[0] is merged" in message
    assert "*base" in message and "explode" in message


def test_merge_key_with_own_resources_converts_each_container() -> None:
    text = """\
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - &base
    name: a
    image: busybox
    env: [{name: X, value: "1"}]
    resources:
      limits: {nvidia.com/gpu: 1}
  - <<: *base
    name: b
    resources:
      limits: {nvidia.com/gpu: 2}
"""
    result, _ = run(text)  # b overrides the merged resources with its own map: no shared node is edited
    a, b = docs(result.output)[1]["spec"]["containers"]
    assert _requests(a) == ["a-gpu"] and _requests(b) == ["b-gpu"]
    assert b["env"] == [{"name": "X", "value": "1"}] and "<<: *base" in result.output


def test_merge_key_in_an_untouched_map_does_not_block() -> None:
    text = """\
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: a
    image: busybox
    env: &env [{name: X, value: "1"}]
    resources:
      limits: {nvidia.com/gpu: 1}
  - name: b
    image: busybox
    env: *env
    securityContext: &sc {runAsUser: 1}
  initContainers:
  - name: i
    image: busybox
    securityContext:
      <<: *sc
      runAsGroup: 2
"""
    result, _ = run(text)
    assert "<<: *sc" in result.output and "env: *env" in result.output
    assert docs(result.output)[1]["spec"]["initContainers"][0]["securityContext"] == {"runAsUser": 1, "runAsGroup": 2}


def test_flow_style_resources_get_braced_claim_entries() -> None:
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: s}\nspec:\n  containers:\n  - name: c\n    image: x\n" \
           "    resources: {limits: {nvidia.com/gpu: 1}}\n"
    result, _ = run(text)
    assert "resources: {claims: [{name: accelerators}]}" in result.output
