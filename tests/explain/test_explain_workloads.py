"""explain places the pods of workloads (what `migrate` writes): `migrate app.yaml | explain -` answers
whether the migrated workload would schedule, every replica on its own, one after another."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import alloc_builders as b
import pytest
import yaml
from explain_testlib import class_docs, explain, fleet_list, nodes, write_yaml

from dra_driver.explain.workloads import MAX_PODS, replicas


def _container(gpus: int, name: str = "main") -> dict[str, Any]:
    return {"name": name, "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": gpus, "cpu": "4"}}}


def _deployment(replica_count: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llm", "namespace": "serving"},
        "spec": {
            "replicas": replica_count,
            "selector": {"matchLabels": {"app": "llm"}},
            "template": {"metadata": {"labels": {"app": "llm"}}, "spec": {"containers": [_container(gpus), {"name": "sidecar", "image": "envoy:1"}]}},
        },
    }


def _pytorch_job(workers: int, gpus: int) -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        return {"replicas": count, "template": {"spec": {"containers": [_container(gpus, "pytorch")]}}}

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "bert", "namespace": "ml"},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}}}  # fmt: skip


OTHER_OBJECTS = [
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "llm", "namespace": "serving"}, "spec": {"ports": [{"port": 80}]}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "llm-config", "namespace": "serving"}, "data": {"a": "b"}},
]


def _pipeline(app: Path, *explain_args: str, migrate_args: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """`dra-driver migrate app.yaml | dra-driver explain - ...`, two real processes and a real pipe."""
    command = [sys.executable, "-m", "dra_driver.cli.main"]
    migrate = subprocess.Popen([*command, "migrate", *migrate_args, str(app)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        done = subprocess.run([*command, "explain", "-", *explain_args], stdin=migrate.stdout, capture_output=True, text=True, timeout=120)
    finally:
        assert migrate.stdout is not None
        migrate.stdout.close()
        assert migrate.wait(timeout=60) == 0
    return done


def test_migrate_then_explain_a_deployment(tmp_path: Path) -> None:
    app = write_yaml(tmp_path / "app.yaml", [*OTHER_OBJECTS, _deployment(2, 4)])
    done = _pipeline(app, "--profile", "dgx-h100")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "== Pod serving/llm-0 (Deployment serving/llm, replica 1 of 2) ==" in done.stdout
    assert "ALLOCATABLE: all 2 pods placed, on node-0" in done.stdout
    assert "Note: skipped 1 ConfigMap: explain places only" in done.stdout and "Note: skipped 1 Service: explain places only" in done.stdout
    # Three replicas of four GPUs do not fit one eight-GPU node: the third pod finds the first two's GPUs taken.
    app = write_yaml(tmp_path / "app.yaml", [*OTHER_OBJECTS, _deployment(3, 4)])
    done = _pipeline(app, "--profile", "dgx-h100", "-o", "json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["allocatable"] is False
    assert [pod["allocatable"] for pod in report["pods"]] == [True, True, False]
    third = report["pods"][2]["requests"][0]["nodes"]["node-0"]["rejected"]
    assert sum(1 for r in third if r["code"] == "allocated") == 8
    done = _pipeline(app, "--profile", "dgx-h100", "--nodes", "2")
    assert done.returncode == 0 and "ALLOCATABLE: all 3 pods placed, on node-0, node-1" in done.stdout


def test_migrate_then_explain_an_operator_job(tmp_path: Path) -> None:
    """A PyTorchJob's master and workers are separate pods: one 8-GPU pod per node."""
    app = write_yaml(tmp_path / "job.yaml", [_pytorch_job(3, 8)])
    done = _pipeline(app, "--profile", "dgx-h100", "--nodes", "4", "-o", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    pods = json.loads(done.stdout)["pods"]
    assert [p["pod"].split(" (")[0] for p in pods] == ["Pod ml/bert-master", "Pod ml/bert-worker-0", "Pod ml/bert-worker-1", "Pod ml/bert-worker-2"]
    assert sorted(p["node"] for p in pods) == ["node-0", "node-1", "node-2", "node-3"]
    done = _pipeline(app, "--profile", "dgx-h100", "--nodes", "3")
    assert done.returncode == 1 and "NOT ALLOCATABLE: 3 of 4 pods placed; not placed: Pod ml/bert-worker-2" in done.stdout


def test_migrate_to_extended_resources_then_explain_with_and_without_the_gate(tmp_path: Path) -> None:
    """--strategy extended-resource keeps nvidia.com/gpu: DRA serves it only with DRAExtendedResource on."""
    app = write_yaml(tmp_path / "app.yaml", [_deployment(1, 2)])
    done = _pipeline(app, "--profile", "dgx-h100", "--feature-gates", "DRAExtendedResource=true", migrate_args=("--strategy", "extended-resource"))
    assert done.returncode == 0 and "ALLOCATABLE on node-0" in done.stdout, done.stdout + done.stderr
    done = _pipeline(app, "--profile", "dgx-h100", migrate_args=("--strategy", "extended-resource"))
    assert done.returncode == 1 and "NOT ALLOCATABLE: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu." in done.stdout


def _migrated(tmp_path: Path, docs: list[dict[str, Any]]) -> Path:
    """migrate's output as a file."""
    source = write_yaml(tmp_path / "in.yaml", docs)
    out = tmp_path / "out.yaml"
    with out.open("w") as stream:
        done = subprocess.run([sys.executable, "-m", "dra_driver.cli.main", "migrate", str(source)], stdout=stream, stderr=subprocess.DEVNULL)
    assert done.returncode == 0
    return out


@pytest.mark.parametrize(
    ("workload", "pods"),
    [
        (
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "j"},
                "spec": {"parallelism": 3, "template": {"spec": {"containers": [_container(1)]}}},
            },
            3,
        ),
        (
            {
                "apiVersion": "batch/v1",
                "kind": "CronJob",
                "metadata": {"name": "c"},
                "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": {"spec": {"containers": [_container(1)]}}}}},
            },
            1,
        ),
        (
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": "s"},
                "spec": {"replicas": 2, "serviceName": "s", "selector": {}, "template": {"spec": {"containers": [_container(1)]}}},
            },
            2,
        ),
        (
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": "d"},
                "spec": {"selector": {}, "template": {"spec": {"containers": [_container(1)]}}},
            },
            1,
        ),
        (
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "zero"},
                "spec": {"replicas": 0, "template": {"spec": {"containers": [_container(1)]}}},
            },
            0,
        ),
    ],
    ids=["job-parallelism", "cronjob", "statefulset", "daemonset", "zero-replicas"],
)
def test_core_workloads_become_one_pod_per_replica(tmp_path: Path, capsys: pytest.CaptureFixture[str], workload: dict[str, Any], pods: int) -> None:
    path = _migrated(tmp_path, [workload])
    code, out, err = explain(capsys, path, "--profile", "dgx-h100", "-o", "json")
    if pods == 0:
        assert code == 2 and "nothing to place" in err and "0 replicas" in err
        return
    assert code == 0, out + err
    assert len(json.loads(out)["pods"]) == pods
    if workload["kind"] == "DaemonSet":
        assert any("a DaemonSet runs one pod on every node it selects" in note for note in json.loads(out)["notes"])


def test_a_workload_with_generate_name_names_its_pods_after_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": "eval-"},
        "spec": {"template": {"spec": {"containers": [_container(1)]}}},
    }
    code, out, err = explain(capsys, _migrated(tmp_path, [job]), "--profile", "dgx-h100", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["pods"][0]["pod"] == "Pod default/eval-* (Job default/eval-*)"  # generateName, as migrate reports it


def test_replicas_multiply_along_the_path() -> None:
    jobset = {"spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 4, "template": {"spec": {}}}}}]}}
    assert replicas(jobset, ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec")) == 8
    ray = {"spec": {"workerGroupSpecs": [{"replicas": 3, "minReplicas": 1, "template": {"spec": {}}}], "headGroupSpec": {"template": {"spec": {}}}}}
    assert replicas(ray, ("spec", "workerGroupSpecs", 0, "template", "spec")) == 3
    assert replicas(ray, ("spec", "headGroupSpec", "template", "spec")) == 1
    assert replicas({"spec": {"replicas": True, "template": {"spec": {}}}}, ("spec", "template", "spec")) == 1  # not a count


def test_a_claim_two_pods_share_is_allocated_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Both replicas name one (unallocated) ResourceClaim: the first pod gets it allocated, the second shares it."""
    claim = b.claim_doc([b.exact("gpu", count=2)], name="shared")
    claim["metadata"]["namespace"] = "serving"
    deployment = _deployment(2, 0)
    spec = deployment["spec"]["template"]["spec"]
    spec["containers"] = [{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}]
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "shared"}]
    path = write_yaml(tmp_path / "app.yaml", [*class_docs(), claim, deployment])
    code, out, _ = explain(capsys, path, "--fleet", fleet_list(tmp_path, nodes(count=2, per_node=2)), "-o", "json")
    assert code == 0, out
    pods = json.loads(out)["pods"]
    assert list(pods[0]["allocations"]) == ["serving/shared"] and pods[1]["allocations"] == {}
    assert pods[0]["node"] == pods[1]["node"] == "node-0"  # the second pod goes where the claim is


def test_operator_kind_without_pod_templates_is_invalid_with_advice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train_job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "t"},
                 "spec": {"trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}}}  # fmt: skip
    code, _, err = explain(capsys, write_yaml(tmp_path / "t.yaml", [train_job]), "--profile", "dgx-h100")
    assert code == 2 and "explain cannot place the pods of this TrainJob" in err and "resourcesPerNode" in err


def test_workload_pods_without_devices_are_not_placed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    web = _deployment(2, 0)
    web["metadata"]["name"] = "web"
    web["spec"]["template"]["spec"]["containers"] = [{"name": "nginx", "image": "nginx"}]
    path = _migrated(tmp_path, [web, _deployment(1, 2)])
    code, out, _ = explain(capsys, path, "--profile", "dgx-h100", "-o", "json")
    report = json.loads(out)
    assert code == 0 and [p["pod"].split(" (")[0] for p in report["pods"]] == ["Pod serving/llm"]
    assert "2 workload pod(s) ask for no devices and are not placed" in report["notes"]


def test_at_most_max_pods_are_placed_and_the_rest_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    second = _deployment(40, 1)
    second["metadata"]["name"] = "llm-b"
    path = _migrated(tmp_path, [_deployment(40, 1), second])
    code, out, _ = explain(capsys, path, "--profile", "dgx-h100", "--nodes", "8", "-o", "json")
    report = json.loads(out)
    assert code == 0 and len(report["pods"]) == MAX_PODS
    assert f"only the first {MAX_PODS} of 80 workload pods are placed; the other 16 are not checked" in report["notes"]


def test_a_huge_replica_count_is_not_expanded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _migrated(tmp_path, [_deployment(10**9, 1)])
    code, out, _ = explain(capsys, path, "--profile", "dgx-h100", "--nodes", "8", "-o", "json")
    report = json.loads(out)
    assert code == 0 and len(report["pods"]) == MAX_PODS
    assert f"Deployment/serving/llm: 1,000,000,000 replicas; explain places at most {MAX_PODS} pods, the others are not checked" in report["notes"]


def test_odd_pod_specs_are_read_without_crashing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    odd = _deployment(1, 1)
    odd["spec"]["template"]["spec"]["containers"] = ["not-a-container", {"name": "c", "resources": {"limits": ["x"]}}, _container(1)]
    code, out, err = explain(
        capsys, write_yaml(tmp_path / "app.yaml", [odd]), "--profile", "dgx-h100", "--feature-gates", "DRAExtendedResource=true", "-o", "json"
    )
    assert code == 0, err
    assert len(json.loads(out)["pods"]) == 1


def test_a_file_of_kinds_explain_does_not_place_is_refused_naming_what_it_places(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = explain(capsys, write_yaml(tmp_path / "a.yaml", [*OTHER_OBJECTS]), "--profile", "dgx-h100")
    assert code == 2 and "nothing to place (skipped 1 ConfigMap, 1 Service)" in err
    assert "Pods and workloads (Deployment" in err and "is not one of" not in err


def test_a_single_pod_keeps_the_plain_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _migrated(tmp_path, [_deployment(1, 2)])
    code, out, _ = explain(capsys, path, "--profile", "dgx-h100")
    assert code == 0 and "ALLOCATABLE on node-0" in out and "==" not in out
    assert yaml.safe_load(out.split("status.allocation:\n", 1)[1].split("\n", 1)[1])["allocation"]["devices"]["results"][1]["device"] == "gpu-1"
