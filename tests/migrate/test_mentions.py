"""Every known device-plugin resource name anywhere in an input is converted or reported, never passed over."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrate_testlib import cli, pod_manifest, run
from shared_corpus import require
from dra_driver.migrate import Action

TRAINJOB = """apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: tune
spec:
  runtimeRef:
    name: torch-distributed
  trainer:
    numNodes: 2
    resourcesPerNode:
      limits:
        nvidia.com/gpu: 4
"""
SPARK = """apiVersion: sparkoperator.k8s.io/v1beta2
kind: SparkApplication
metadata:
  name: rapids
spec:
  driver:
    cores: 1
  executor:
    instances: 2
    gpu:
      name: nvidia.com/gpu
      quantity: 1
"""
CUSTOM = """apiVersion: example.com/v1
kind: Thing
metadata:
  name: t
spec:
  accelerator:
    type: nvidia.com/gpu
    perWorker: 2
  nodeSelector:
    nvidia.com/gpu.product: A100
  tolerations:
  - key: nvidia.com/gpu
    operator: Exists
"""


def _left(text: str) -> list[tuple[str, str, str]]:
    result, report = run(text)
    assert result.output == text  # reported, never changed
    return [(f.where.path, f.subject, f.reason) for f in report.by_action(Action.NOT_CONVERTED)]


def test_trainjob_resources_per_node_are_reported_with_the_runtime_advice() -> None:
    [(path, subject, reason)] = _left(TRAINJOB)
    assert (path, subject) == ("spec.trainer.resourcesPerNode.limits", "nvidia.com/gpu")
    assert "TrainingRuntime" in reason


def test_spark_gpu_named_as_a_value_is_reported() -> None:
    [(path, subject, reason)] = _left(SPARK)
    assert (path, subject) == ("spec.executor.gpu.name", "nvidia.com/gpu")
    assert "SparkApplication" in reason


@pytest.mark.parametrize("resource", ["gpu.intel.com/i915", "gpu.intel.com/xe"])
def test_intel_gpu_resources_are_reported(resource: str) -> None:
    [(path, subject, reason)] = _left(pod_manifest("arc", resource))
    assert (path, subject) == ("spec.containers[0].resources", resource) and "Intel" in reason


def test_names_in_unknown_kinds_count_but_labels_and_toleration_keys_do_not() -> None:
    [(path, subject, reason)] = _left(CUSTOM)
    assert (path, subject) == ("spec.accelerator.type", "nvidia.com/gpu") and "example.com/v1" in reason


def test_a_name_outside_the_containers_of_a_converted_workload_is_reported() -> None:
    text = pod_manifest("arc", "nvidia.com/gpu") + "  initContainers: []\n  overhead:\n    nvidia.com/gpu: 1\n"
    result, report = run(text)
    [finding] = report.by_action(Action.NOT_CONVERTED)
    assert (finding.where.path, finding.subject) == ("spec.overhead", "nvidia.com/gpu")
    assert "outside the containers' resources" in finding.reason and finding.remains
    assert report.by_action(Action.CONVERTED)  # the container's own request still converts


def test_extended_resource_strategy_serves_requests_named_anywhere() -> None:
    result, report = run(SPARK, strategy="extended-resource")
    assert result.output == SPARK  # the shipped extended.gpu.nvidia.com serves it: nothing emitted
    [note] = report.by_action(Action.NOTE)
    assert note.subject == "nvidia.com/gpu" and "extended.gpu.nvidia.com" in note.reason


@pytest.mark.parametrize("resource", ["aws.amazon.com/neuron", "aws.amazon.com/neuroncore", "google.com/tpu"])
def test_other_accelerators_are_read_and_reported(resource: str) -> None:
    [(path, subject, reason)] = _left(pod_manifest("x", resource))
    assert (path, subject) == ("spec.containers[0].resources", resource) and "does not know how to map" in reason


EMBEDDED = """apiVersion: v1
kind: ConfigMap
metadata:
  name: validation-job
data:
  job.yaml: |
    apiVersion: batch/v1
    kind: Job
    metadata:
      name: burn-in
    spec:
      template:
        spec:
          containers:
          - name: burn
            image: x
            # amd.com/gpu: 8 below makes this a sole-tenant job
            resources:
              limits:
                nvidia.com/gpu: $$GPUS
              requests:
                nvidia.com/gpu: $$GPUS
  job.json: '{"resources":{"limits":{"amd.com/gpu":8}}}'
  notes.txt: |
    # amd.com/gpu: 8 in a comment line, and a name as a value: resource=nvidia.com/gpu
"""


def test_a_request_inside_a_string_is_reported_and_counted_as_left() -> None:
    left = [(path, subject) for path, subject, _ in _left(EMBEDDED)]
    assert left == [("data.job.yaml", "nvidia.com/gpu"), ("data.job.json", "amd.com/gpu")]
    _, report = run(EMBEDDED)
    assert all(f.remains and "inside a string" in f.reason and "dra-driver migrate FILE" in f.reason
               for f in report.by_action(Action.NOT_CONVERTED))


def test_check_fails_on_a_request_inside_a_string(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "configmap.yaml"
    path.write_text(EMBEDDED)
    code, _, err = cli(["--check", str(path)], capsys)
    assert code == 4 and "2 device-plugin request(s) left unconverted" in err


def test_the_real_gpu_validation_configmaps_are_reported() -> None:
    # ROCm's cluster validation keeps its MPIJob and Jobs as text in ConfigMaps (corpus/, never copied here)
    path = require() / "corpus" / "ROCm_gpu-operator__example_gpu-validation-cluster_configs_cluster-validation-job.yaml"
    _, report = run(path.read_text(), path.name)
    assert len(report.remaining) == 3
    assert {f.where.obj.split("/")[0] for f in report.remaining} == {"ConfigMap"}
