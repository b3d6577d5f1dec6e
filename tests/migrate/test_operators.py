"""The operator table: every convertible kind's pod specs are found at their paths, converted, and named by role."""

from __future__ import annotations

import json
from typing import Any

import pytest

from migrate_testlib import base_name, device_plugin_requests, is_toleration_note, objects, run
from dra_driver.migrate import Action
from dra_driver.sources.operators import OPERATOR_KINDS

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
    covered = {c[0] for c in CASES + NEW_KINDS}
    convertible = {k for k, e in OPERATOR_KINDS.items() if e.convert}
    # same shape as PyTorchJob / the other spelling; NIMService below
    assert convertible - covered <= {"XGBoostJob", "JAXJob", "HyperPodPytorchJob", "NIMService"}


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


NEW_KINDS: list[tuple[str, str, dict[str, Any], set[str]]] = [
    ("TrainingRuntime", "trainer.kubeflow.org/v1alpha1",
     {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": TEMPLATE}}}]}}}, {"node"}),
    ("ClusterTrainingRuntime", "trainer.kubeflow.org/v1alpha1",
     {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": TEMPLATE}}}]}}}, {"node"}),
    ("LLMInferenceServiceConfig", "serving.kserve.io/v1alpha1", {"template": POD_SPEC, "worker": POD_SPEC}, {"main", "worker"}),
    ("HyperPodPyTorchJob", "sagemaker.amazonaws.com/v1",
     {"replicaSpecs": [{"name": "pods", "replicas": 2, "template": TEMPLATE}]}, {"pods"}),
    ("AppWrapper", "workload.codeflare.dev/v1beta2",
     {"components": [
         {"template": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "trainer"}, "spec": {"template": TEMPLATE}},
          "podSets": [{"replicas": 1, "path": "template.spec.template"}]},
         {"template": {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "eval"},
                       "spec": {"replicatedJobs": [{"name": "workers", "template": {"spec": {"template": TEMPLATE}}}]}}},
     ]}, {"trainer", "eval-workers"}),
]


@pytest.mark.parametrize(("kind", "api_version", "spec", "roles"), NEW_KINDS, ids=[c[0] for c in NEW_KINDS])
def test_kinds_with_a_pod_template_in_their_own_place(kind: str, api_version: str, spec: dict[str, Any], roles: set[str]) -> None:
    test_convertible_kind(kind, api_version, spec, roles)


def test_an_app_wrapper_component_gets_claims_at_its_own_pod_template() -> None:
    [kind, api_version, spec, _] = NEW_KINDS[-1]
    text = json.dumps({"apiVersion": api_version, "kind": kind, "metadata": {"name": "w", "namespace": "team"}, "spec": spec})
    result, report = run(text)
    [wrapper] = [o for o in objects(result.output) if o["kind"] == kind]
    job_pod = wrapper["spec"]["components"][0]["template"]["spec"]["template"]["spec"]
    assert base_name(job_pod["resourceClaims"][0]["resourceClaimTemplateName"]) == "w-trainer-accelerators"
    templates = [o for o in objects(result.output) if o["kind"] == "ResourceClaimTemplate"]
    assert {t["metadata"]["namespace"] for t in templates} == {"team"}  # the AppWrapper's namespace
    paths = {f.where.path for f in report.by_action(Action.CONVERTED)}
    assert "spec.components[0].template.spec.template.spec.containers[0]" in paths


@pytest.mark.parametrize("kind", ["SparkApplication", "ScheduledSparkApplication", "TrainJob"])
def test_kinds_without_a_place_for_claims_get_their_own_advice(kind: str) -> None:
    entry = OPERATOR_KINDS[kind]
    assert not entry.convert and "--strategy extended-resource" in entry.check


NIM = """apiVersion: apps.nvidia.com/v1alpha1
kind: NIMService
metadata:
  name: llama
  namespace: nim
spec:
  image:
    repository: nvcr.io/nim/meta/llama3-8b-instruct
    tag: "1.0.3"
  replicas: 1
  resources:
    limits:
      nvidia.com/gpu: 2
      memory: 32Gi
  expose:
    service:
      port: 8000
"""


def test_a_nim_service_gets_its_claim_through_dra_resources() -> None:
    result, report = run(NIM)
    [service] = [o for o in objects(result.output) if o["kind"] == "NIMService"]
    [template] = [o for o in objects(result.output) if o["kind"] == "ResourceClaimTemplate"]
    assert base_name(template["metadata"]["name"]) == "llama-accelerators" and template["metadata"]["namespace"] == "nim"
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"] == {"deviceClassName": "gpu.nvidia.com", "count": 2}
    assert service["spec"]["draResources"] == [{"resourceClaimTemplateName": template["metadata"]["name"]}]
    assert service["spec"]["resources"] == {"limits": {"memory": "32Gi"}}  # no container claims: NIM has no pod spec
    assert service["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert not device_plugin_requests(result.output)
    assert "draResources" in next(f.reason for f in report.by_action(Action.NOTE) if f.subject == "NIMService")
    again, _ = run(result.output)
    assert again.output == result.output


def test_a_nim_service_whose_resources_empty_loses_the_map() -> None:
    result, _ = run(NIM.replace("      memory: 32Gi\n", ""))
    [service] = [o for o in objects(result.output) if o["kind"] == "NIMService"]
    assert "resources" not in service["spec"] and len(service["spec"]["draResources"]) == 1
