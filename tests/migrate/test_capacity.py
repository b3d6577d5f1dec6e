"""Quota and capacity objects keep counting migrated GPUs: ResourceQuota converted where exact, the rest reported."""

from __future__ import annotations

import pytest

from migrate_testlib import by_kind, run
from dra_driver.migrate import Action

QUOTA = """apiVersion: v1
kind: ResourceQuota
metadata:
  name: gpus
  namespace: team-a
spec:
  hard:
    cpu: "64"
    requests.nvidia.com/gpu: "8"
    requests.nvidia.com/mig-1g.10gb: 4
    requests.amd.com/cpx_nps4: 16
"""
CLUSTER_QUEUE = """apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: team-a
spec:
  resourceGroups:
  - coveredResources: ["cpu", "nvidia.com/gpu"]
    flavors:
    - name: a100
      resources:
      - name: cpu
        nominalQuota: 64
      - name: nvidia.com/gpu
        nominalQuota: 8
"""
NODEPOOL = """apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: gpu
spec:
  limits:
    cpu: 1000
    nvidia.com/gpu: 16
  template:
    spec:
      taints:
      - key: nvidia.com/gpu
        effect: NoSchedule
"""
QUEUED_JOB = """apiVersion: batch/v1
kind: Job
metadata:
  name: train
  labels:
    kueue.x-k8s.io/queue-name: team-a
spec:
  template:
    spec:
      containers:
      - name: c
        image: x
        resources:
          limits:
            nvidia.com/gpu: 2
"""


def test_resource_quota_gains_the_device_class_quota_where_the_mapping_is_exact() -> None:
    result, report = run(QUOTA)
    [quota] = by_kind(result.output, "ResourceQuota")
    assert quota["spec"]["hard"] == {
        "cpu": "64", "requests.nvidia.com/gpu": "8", "requests.nvidia.com/mig-1g.10gb": 4, "requests.amd.com/cpx_nps4": 16,
        "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "8",
        "mig-1g.10gb.nvidia.com.deviceclass.resource.k8s.io/devices": 4,
    }
    assert [f.subject for f in report.by_action(Action.CONVERTED)] == ["requests.nvidia.com/gpu", "requests.nvidia.com/mig-1g.10gb"]
    # an AMD partition is a selector on partition.gpu.amd.com: a class quota would count every partition mode
    [left] = report.by_action(Action.NOT_CONVERTED)
    assert left.subject == "requests.amd.com/cpx_nps4" and "partition.gpu.amd.com" in left.reason and not left.remains
    assert result.output.startswith(QUOTA)  # only lines added
    again, _ = run(result.output)
    assert again.output == result.output


def test_an_existing_class_quota_is_kept_and_a_different_limit_noted() -> None:
    text = QUOTA + "    gpu.nvidia.com.deviceclass.resource.k8s.io/devices: \"2\"\n"
    result, report = run(text)
    [quota] = by_kind(result.output, "ResourceQuota")
    assert quota["spec"]["hard"]["gpu.nvidia.com.deviceclass.resource.k8s.io/devices"] == "2"
    assert any("already set to 2" in f.reason for f in report.by_action(Action.NOTE))


def test_extended_resource_strategy_leaves_the_quota_and_says_what_to_add() -> None:
    result, report = run(QUOTA, strategy="extended-resource")
    assert result.output == QUOTA
    assert {f.subject for f in report.by_action(Action.NOTE)} >= {"requests.nvidia.com/gpu"}


def test_kueue_cluster_queue_is_reported_with_the_device_class_mapping() -> None:
    result, report = run(CLUSTER_QUEUE)
    assert result.output == CLUSTER_QUEUE
    [finding] = report.by_action(Action.NOT_CONVERTED)
    assert finding.where.path == "spec.resourceGroups[0].coveredResources" and finding.subject == "nvidia.com/gpu"
    assert "deviceClassMappings: [{name: nvidia.com/gpu, deviceClassNames: [gpu.nvidia.com]}]" in finding.reason


def test_karpenter_node_pool_limits_are_reported_but_taint_keys_are_not() -> None:
    result, report = run(NODEPOOL)
    assert result.output == NODEPOOL
    [finding] = report.by_action(Action.NOT_CONVERTED)
    assert (finding.where.path, finding.subject) == ("spec.limits", "nvidia.com/gpu") and "Karpenter" in finding.reason


def test_a_workload_queued_by_kueue_gets_a_note() -> None:
    _, report = run(QUEUED_JOB)
    [note] = [f for f in report.by_action(Action.NOTE) if f.subject == "kueue.x-k8s.io/queue-name"]
    assert note.where.path == "metadata.labels" and "deviceClassMappings" in note.reason
    _, unqueued = run(QUEUED_JOB.replace("kueue.x-k8s.io/queue-name", "team"))
    assert not [f for f in unqueued.by_action(Action.NOTE) if "Kueue" in f.reason]
    on_template = QUEUED_JOB.replace("kueue.x-k8s.io/queue-name", "team").replace(
        "  template:\n    spec:\n", "  template:\n    metadata:\n      labels:\n        kueue.x-k8s.io/queue-name: q\n    spec:\n")
    _, report = run(on_template)
    [note] = [f for f in report.by_action(Action.NOTE) if f.subject == "kueue.x-k8s.io/queue-name"]
    assert note.where.path == "spec.template.metadata.labels"


def test_a_limit_range_on_gpus_is_reported_with_the_quota_to_use() -> None:
    text = ("apiVersion: v1\nkind: LimitRange\nmetadata:\n  name: gpus\nspec:\n  limits:\n  - type: Container\n"
            "    max:\n      nvidia.com/gpu: 2\n    default:\n      nvidia.com/gpu: 1\n")
    result, report = run(text)
    assert result.output == text
    left = [(f.where.path, f.subject) for f in report.by_action(Action.NOT_CONVERTED)]
    assert left == [("spec.limits[0].max", "nvidia.com/gpu"), ("spec.limits[0].default", "nvidia.com/gpu")]
    bound = report.by_action(Action.NOT_CONVERTED)[0]
    assert "deviceclass.resource.k8s.io/devices" in bound.reason and "no nvidia.com/gpu limit" in bound.reason


@pytest.mark.parametrize(("field", "side"), [("default", "limits"), ("defaultRequest", "requests")])
def test_a_limit_range_default_gpu_is_a_request_left_to_remove_before_the_rollout(field: str, side: str) -> None:
    # LimitRanger fills the default into every container lacking the resource, migrated ones included
    text = ("apiVersion: v1\nkind: LimitRange\nmetadata:\n  name: gpus\nspec:\n  limits:\n  - type: Container\n"
            f"    {field}:\n      nvidia.com/gpu: 1\n      cpu: 500m\n")
    result, report = run(text)
    assert result.output == text
    [finding] = report.remaining
    assert finding.where.path == f"spec.limits[0].{field}" and finding.subject == "nvidia.com/gpu"
    assert f"into the {side} of every container" in finding.reason and "migrated containers included" in finding.reason
    assert f"remove nvidia.com/gpu from `{field}` before rolling out" in finding.reason
    assert "ResourceQuota" not in finding.reason  # a default is no namespace total


def test_a_kueue_provisioning_request_config_is_reported_like_a_cluster_queue_not_left() -> None:
    text = ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ProvisioningRequestConfig\nmetadata:\n  name: prov\nspec:\n"
            "  provisioningClassName: queued-provisioning.gke.io\n  managedResources:\n  - nvidia.com/gpu\n")
    result, report = run(text)
    assert result.output == text and not report.remaining
    [finding] = report.by_action(Action.NOT_CONVERTED)
    assert finding.where.path == "spec.managedResources[0]" and finding.subject == "nvidia.com/gpu"
    assert "deviceClassMappings: [{name: nvidia.com/gpu, deviceClassNames: [gpu.nvidia.com]}]" in finding.reason
    assert "not a workload this tool knows" not in finding.reason


def test_a_volcano_queue_is_reported_with_the_exact_quota_to_apply() -> None:
    text = ("apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata:\n  name: research\nspec:\n"
            "  capability:\n    cpu: 100\n    nvidia.com/gpu: 16\n")
    result, report = run(text)
    assert result.output == text
    [finding] = report.by_action(Action.NOT_CONVERTED)
    assert (finding.where.path, finding.subject) == ("spec.capability", "nvidia.com/gpu")
    assert "`spec.hard: {gpu.nvidia.com.deviceclass.resource.k8s.io/devices: 16}`" in finding.reason
