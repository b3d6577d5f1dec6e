"""Structure of the migrated corpus workloads, one scenario each."""

from __future__ import annotations

from typing import Any

from migrate_testlib import CORPUS, base_name, by_kind, docs, run
from dra_driver.migrate import Action


def _migrate(name: str) -> tuple[str, Any]:
    result, report = run((CORPUS / name).read_text(), name)
    return result.output, report


def _requests(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r["exactly"] for r in template["spec"]["spec"]["devices"]["requests"]}


def _selectors(exactly: dict[str, Any]) -> list[str]:
    return [s["cel"]["expression"] for s in exactly.get("selectors", [])]


def test_training_job_moves_product_label_onto_the_request() -> None:
    out, _ = _migrate("training-job.yaml")
    [template] = by_kind(out, "ResourceClaimTemplate")
    name = template["metadata"]["name"]
    assert base_name(name) == "llama-pretrain-accelerators" and template["metadata"]["namespace"] == "research"
    assert template["apiVersion"] == "resource.k8s.io/v1"
    exactly = _requests(template)["trainer-gpu"]
    assert exactly["deviceClassName"] == "gpu.nvidia.com" and exactly["count"] == 8
    assert _selectors(exactly) == ['device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"']
    [job] = by_kind(out, "Job")
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    resources = spec["containers"][0]["resources"]
    assert resources["limits"] == {"memory": "1600Gi", "cpu": "180"}
    assert resources["requests"] == {"memory": "1600Gi"}
    assert resources["claims"] == [{"name": "accelerators"}]
    assert spec["resourceClaims"] == [{"name": "accelerators", "resourceClaimTemplateName": name}]


def test_inference_containers_keep_separate_devices() -> None:
    out, report = _migrate("inference-deployment.yaml")
    [template] = by_kind(out, "ResourceClaimTemplate")
    requests = _requests(template)
    assert set(requests) == {"server-gpu", "embedder-mig-1g-10gb"}
    assert requests["embedder-mig-1g-10gb"]["deviceClassName"] == "mig-1g.10gb.nvidia.com"
    product = 'device.attributes["gpu.nvidia.com"].productName in ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]'
    assert _selectors(requests["server-gpu"]) == [product] == _selectors(requests["embedder-mig-1g-10gb"])
    [deployment] = by_kind(out, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    server, metrics, embedder = spec["containers"]
    assert server["resources"]["claims"] == [{"name": "accelerators", "request": "server-gpu"}]
    assert embedder["resources"] == {"claims": [{"name": "accelerators", "request": "embedder-mig-1g-10gb"}]}
    assert metrics["resources"] == {"limits": {"cpu": "200m"}}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}]}]
    assert any(f.subject == "nvidia.com/gpu-sharing-strategy" for f in report.by_action(Action.NOT_CONVERTED))


def test_cronjob_family_and_memory_become_selectors_and_affinity_disappears() -> None:
    out, report = _migrate("cronjob.yaml")
    [template] = by_kind(out, "ResourceClaimTemplate")
    exactly = _requests(template)["eval-gpu"]
    assert _selectors(exactly) == [
        'device.attributes["gpu.nvidia.com"].architecture == "Hopper"',
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40000Mi")) > 0',
    ]
    [cron] = by_kind(out, "CronJob")
    affinity = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in affinity
    assert affinity["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 50
    kept = [f for f in report.by_action(Action.NOT_CONVERTED) if "preference" in f.reason]
    assert [f.subject for f in kept] == ["nvidia.com/gpu.product"]


def test_statefulset_init_container_reuses_and_sidecar_owns() -> None:
    out, report = _migrate("statefulset-init.yaml")
    [template] = by_kind(out, "ResourceClaimTemplate")
    assert set(_requests(template)) == {"profiler-gpu", "server-gpu"}
    [sts] = by_kind(out, "StatefulSet")
    spec = sts["spec"]["template"]["spec"]
    build, profiler = spec["initContainers"]
    assert build["resources"]["claims"] == [{"name": "accelerators", "request": "server-gpu"}]
    assert profiler["resources"]["claims"] == [{"name": "accelerators", "request": "profiler-gpu"}]
    assert spec["containers"][0]["resources"]["claims"] == [{"name": "accelerators", "request": "server-gpu"}]
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"] == {"requests": {"storage": "100Gi"}}
    assert any("build-index" in f.reason for f in report.by_action(Action.NOTE))


def test_init_container_without_a_matching_request_gets_its_own() -> None:
    text = (CORPUS / "statefulset-init.yaml").read_text().replace("nvidia.com/gpu: 1\n            memory", "nvidia.com/gpu: 2\n            memory")
    result, report = run(text)
    [template] = by_kind(result.output, "ResourceClaimTemplate")
    assert _requests(template)["build-index-gpu"]["count"] == 1
    assert _requests(template)["server-gpu"]["count"] == 2
    assert any("held for the pod's lifetime" in f.reason for f in report.by_action(Action.NOTE))


def test_list_gets_its_template_as_an_item_before_the_workload() -> None:
    out, _ = _migrate("list.yaml")
    [document] = docs(out)
    assert [i["kind"] for i in document["items"]] == ["Service", "ResourceClaimTemplate", "Deployment"]


def test_mig_profile_without_class_uses_generic_class_and_shared_is_reported() -> None:
    out, report = _migrate("mig.yaml")
    templates = {base_name(t["metadata"]["name"]): t for t in by_kind(out, "ResourceClaimTemplate")}
    odd = _requests(templates["odd-profile-accelerators"])["worker-mig-2g-24gb"]
    assert odd["deviceClassName"] == "mig.nvidia.com"
    assert _selectors(odd) == ['device.attributes["gpu.nvidia.com"].profile == "2g.24gb"']
    pods = {p["metadata"]["name"]: p for p in by_kind(out, "Pod")}
    assert pods["odd-profile"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.memory": "81920"}  # MIG: not exact, kept
    assert pods["shared-gpu"]["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu.shared": 1}}
    assert "shared-gpu-accelerators" not in templates
    assert any(f.subject == "nvidia.com/gpu.shared" for f in report.by_action(Action.NOT_CONVERTED))


def test_amd_gpu_and_partition() -> None:
    out, report = _migrate("amd.yaml")
    templates = {base_name(t["metadata"]["name"]): t for t in by_kind(out, "ResourceClaimTemplate")}
    gpu = _requests(templates["rocm-train-accelerators"])["trainer-gpu"]
    assert gpu["deviceClassName"] == "gpu.amd.com" and gpu["count"] == 4
    assert 'device.attributes["gpu.amd.com"].productName == "AMD_Instinct_MI300X_OAM"' in _selectors(gpu)  # the label's own value
    part = _requests(templates["cpx-inference-accelerators"])["infer-cpx-nps4"]
    assert part["deviceClassName"] == "partition.gpu.amd.com"
    assert _selectors(part)[0] == ('device.attributes["gpu.amd.com"].computePartition == "cpx" && '
                                   'device.attributes["gpu.amd.com"].memoryPartition == "nps4"')
    deployment = by_kind(out, "Deployment")[0]
    assert deployment["spec"]["template"]["spec"]["nodeSelector"] == {"amd.com/gpu.family": "AI"}
    job = by_kind(out, "Job")[0]
    assert "nodeSelector" not in job["spec"]["template"]["spec"]


def test_gaudi_keeps_other_resources() -> None:
    out, _ = _migrate("gaudi.yaml")
    [template] = by_kind(out, "ResourceClaimTemplate")
    assert _requests(template) == {"finetune-gaudi": {"deviceClassName": "gaudi.intel.com", "count": 8}}
    [deployment] = by_kind(out, "Deployment")
    limits = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"hugepages-2Mi": "9800Mi", "memory": "200Gi"}


def test_reported_requests_stay_exactly_as_they_were() -> None:
    out, report = _migrate("reported.yaml")
    [pod] = by_kind(out, "Pod")
    requests_only, fractional, real = pod["spec"]["containers"]
    assert requests_only["resources"] == {"requests": {"nvidia.com/gpu": 1}}
    assert fractional["resources"] == {"limits": {"nvidia.com/gpu": "500m"}}
    assert real["resources"] == {"claims": [{"name": "accelerators"}]}
    assert len(pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]) == 2
    reasons = " ".join(f.reason for f in report.by_action(Action.NOT_CONVERTED))
    assert "requests but not in limits" in reasons and "not a whole number" in reasons and "ORed" in reasons
