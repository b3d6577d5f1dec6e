"""The operator table: every convertible kind's pod specs are found at their paths, converted, and named by role."""

from __future__ import annotations

import json
from typing import Any

import pytest

from migrate_testlib import base_name, device_plugin_requests, is_toleration_note, objects, run
from dra_driver.migrate import Action
from dra_driver.migrate.operators import OPERATOR_KINDS

POD_SPEC = {"containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
TEMPLATE = {"spec": POD_SPEC}
RAY = {"headGroupSpec": {"template": TEMPLATE}, "workerGroupSpecs": [{"groupName": "gpu", "template": TEMPLATE}]}

# kind, apiVersion, spec -> the roles that must get a template (written as JSON: no YAML aliases for the shared parts)
CASES: list[tuple[str, str, dict[str, Any], set[str]]] = [
    ("PyTorchJob", "kubeflow.org/v1", {"pytorchReplicaSpecs": {"Master": {"template": TEMPLATE}, "Worker": {"template": TEMPLATE}}},
     {"master", "worker"}),
    ("TFJob", "kubeflow.org/v1", {"tfReplicaSpecs": {"Chief": {"template": TEMPLATE}}}, {"chief"}),
    ("PaddleJob", "kubeflow.org/v1", {"paddleReplicaSpecs": {"Worker": {"template": TEMPLATE}}}, {"worker"}),
    ("MPIJob", "kubeflow.org/v2beta1", {"mpiReplicaSpecs": {"Launcher": {"template": TEMPLATE}}}, {"launcher"}),
    ("RayCluster", "ray.io/v1", RAY, {"head", "gpu"}),
    ("RayJob", "ray.io/v1", {"rayClusterSpec": RAY, "submitterPodTemplate": TEMPLATE}, {"head", "gpu", "submitter"}),
    ("RayService", "ray.io/v1", {"rayClusterConfig": RAY}, {"head", "gpu"}),
    ("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1",
     {"leaderWorkerTemplate": {"leaderTemplate": TEMPLATE, "workerTemplate": TEMPLATE}}, {"leader", "worker"}),
    ("JobSet", "jobset.x-k8s.io/v1alpha2",
     {"replicatedJobs": [{"name": "trainers", "template": {"spec": {"template": TEMPLATE}}}]}, {"trainers"}),
    ("Job", "batch.volcano.sh/v1alpha1", {"tasks": [{"name": "ps", "template": TEMPLATE}]}, {"ps"}),
    ("LLMInferenceService", "serving.kserve.io/v1alpha1",
     {"template": POD_SPEC, "worker": POD_SPEC, "prefill": {"template": POD_SPEC}}, {"main", "worker", "prefill"}),
]


@pytest.mark.parametrize(("kind", "api_version", "spec", "roles"), CASES, ids=[c[0] for c in CASES])
def test_convertible_kind(kind: str, api_version: str, spec: dict[str, Any], roles: set[str]) -> None:
    text = json.dumps({"apiVersion": api_version, "kind": kind, "metadata": {"name": "w"}, "spec": spec}, indent=2)
    result, report = run(text)
    names = {base_name(o["metadata"]["name"]) for o in objects(result.output) if o["kind"] == "ResourceClaimTemplate"}
    assert names == {f"w-{role}-accelerators" for role in roles}
    assert not device_plugin_requests(result.output)
    assert [f.subject for f in report.by_action(Action.NOTE) if f.subject != "num-gpus" and not is_toleration_note(f)] == [kind]


def test_every_convertible_entry_is_covered_here() -> None:
    covered = {c[0] for c in CASES}
    convertible = {k for k, e in OPERATOR_KINDS.items() if e.convert}
    assert convertible - covered <= {"XGBoostJob", "JAXJob"}  # same shape as PyTorchJob


def test_a_batch_v1_job_is_not_taken_for_a_volcano_job() -> None:
    text = json.dumps({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": TEMPLATE}})
    result, report = run(text)
    assert len([o for o in objects(result.output) if o["kind"] == "ResourceClaimTemplate"]) == 1
    assert not [f for f in report.by_action(Action.NOTE) if not is_toleration_note(f)]


def test_ray_groups_keep_their_gpu_count_in_ray_start_params() -> None:
    spec = {"headGroupSpec": {"rayStartParams": {"num-gpus": "0"}, "template": TEMPLATE},
            "workerGroupSpecs": [{"groupName": "gpu", "rayStartParams": {}, "template": TEMPLATE},
                                 {"groupName": "bare", "template": TEMPLATE}]}
    text = json.dumps({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"}, "spec": spec})
    result, report = run(text)
    [cluster] = [o for o in objects(result.output) if o["kind"] == "RayCluster"]
    assert cluster["spec"]["headGroupSpec"]["rayStartParams"] == {"num-gpus": "0"}  # set by the user: kept
    assert [g["rayStartParams"] for g in cluster["spec"]["workerGroupSpecs"]] == [{"num-gpus": "1"}, {"num-gpus": "1"}]
    assert len([f for f in report.by_action(Action.NOTE) if f.subject == "num-gpus"]) == 2


def test_ray_start_params_shared_through_an_alias_are_copied_before_the_gpu_count_is_added() -> None:
    text = """apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: r
spec:
  headGroupSpec:
    rayStartParams: &params
      dashboard-host: 0.0.0.0
    template:
      spec:
        containers:
        - name: head
          image: ray
  workerGroupSpecs:
  - groupName: gpu
    rayStartParams: *params
    template:
      spec:
        containers:
        - name: worker
          image: ray
          resources:
            limits:
              nvidia.com/gpu: 2
"""
    result, _ = run(text)
    [cluster] = [o for o in objects(result.output) if o["kind"] == "RayCluster"]
    assert cluster["spec"]["headGroupSpec"]["rayStartParams"] == {"dashboard-host": "0.0.0.0"}  # the CPU head: no GPUs
    assert cluster["spec"]["workerGroupSpecs"][0]["rayStartParams"] == {"dashboard-host": "0.0.0.0", "num-gpus": "2"}
