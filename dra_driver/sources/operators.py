"""Operator resources whose pod templates we know: kind -> where the pod specs are, and what to check.

Most operators copy a full `PodTemplateSpec` (or `PodSpec`) from their resource
into the pods they create, so `spec.resourceClaims` and containers'
`resources.claims` pass through to the pods unchanged and the pod templates can
be converted like a Deployment's. Each such entry names what the user must still
check (an operator version that copies the field, env or flags the operator
derives from `nvidia.com/gpu` limits). Entries with `convert=False` are kinds we
recognise whose pod templates cannot carry claims; they are reported with their
own advice instead of "unknown kind".

A path is a tuple of keys from the object to a pod spec; `*` stands for every
value of a mapping (Kubeflow's `Master` / `Worker`) or every item of a list
(KubeRay's `workerGroupSpecs`, JobSet's `replicatedJobs`). The key or the
item's `name` / `groupName` becomes the role in the template name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

ANY = "*"
NIM_CLAIMS = "draResources"  # NIMService: DRA claims of its pods (NVIDIA NIM operator)


@dataclass(frozen=True)
class OperatorKind:
    kind: str
    groups: tuple[str, ...]  # API groups (apiVersion before the '/') this kind is known under
    pod_specs: tuple[tuple[str, ...], ...]
    check: str  # converted: what the user must check; not converted: why not and what to do instead
    convert: bool = True
    # AppWrapper: the path to a list of components whose `template` is a whole object (a Job, a JobSet...)
    wrapped: tuple[str, ...] = ()
    # NIMService: the pod spec path is a spec holding one container's `resources`, claims go to `draResources`
    single_container: bool = False


@dataclass(frozen=True)
class PodSpecAt:
    keys: tuple[str | int, ...]  # concrete path from the object to the pod spec
    role: str  # "worker", "gpu-workers", "" when the kind has a single pod template
    pod_spec: Any


_KUBEFLOW_CHECK = (
    "the Kubeflow training operator copies each replica's pod template, resourceClaims included, into its pods; "
    "check that your operator version does, and that nothing (nprocPerNode: auto, launcher scripts) still counts "
    "GPUs from nvidia.com/gpu limits"
)
_RAY_CHECK = (
    "KubeRay copies the pod template (resourceClaims included) into the Ray pods; it used to pass ray start "
    "--num-gpus, and the autoscaler to size groups, from the Ray container's nvidia.com/gpu limit, which is gone: "
    "this tool sets rayStartParams num-gpus to that count where it was not set; check groups whose GPUs are in "
    "another container"
)
_POD_TEMPLATE_CHECK = "the {operator} controller copies the pod template, resourceClaims included, into its pods; check that your version does"


def _replica_kind(kind: str, field: str) -> OperatorKind:
    return OperatorKind(kind, ("kubeflow.org",), (("spec", field, ANY, "template", "spec"),), _KUBEFLOW_CHECK)


_SPARK_CHECK = (
    "Spark asks for GPUs as spark.{driver,executor}.resource.gpu and the operator writes them as device-plugin "
    "limits on the pods it builds, which have no place for claims in this resource; not converted. Give those pods "
    "a claim through your spark-operator version's pod templates, or use --strategy extended-resource"
)


def _llm_inference(kind: str) -> OperatorKind:
    """KServe's LLMInferenceService and its Config (the same spec, merged into services that name it)."""
    return OperatorKind(kind, ("serving.kserve.io",),
                        (("spec", "template"), ("spec", "worker"), ("spec", "prefill", "template"), ("spec", "prefill", "worker")),
                        "KServe builds the LLMInferenceService pods from these PodSpecs (resourceClaims included); check "
                        "your KServe version, and that nothing in its scheduling (the inference pool) counts device-plugin "
                        "GPU limits")


def _training_runtime(kind: str) -> OperatorKind:
    """Kubeflow Trainer runtimes: a JobSet template, from which every TrainJob naming the runtime gets its pods."""
    return OperatorKind(kind, ("trainer.kubeflow.org",),
                        (("spec", "template", "spec", "replicatedJobs", ANY, "template", "spec", "template", "spec"),),
                        "Kubeflow Trainer builds each TrainJob's JobSet from this template (resourceClaims included); "
                        "a TrainJob's own resourcesPerNode still overrides the container resources: check the TrainJobs "
                        "that use this runtime")


def _hyperpod(kind: str) -> OperatorKind:
    return OperatorKind(kind, ("sagemaker.amazonaws.com",), (("spec", "replicaSpecs", ANY, "template", "spec"),),
                        _POD_TEMPLATE_CHECK.format(operator="SageMaker HyperPod training")
                        + ", and that nothing (nprocPerNode, launcher scripts) counts GPUs from nvidia.com/gpu limits")


def _ray_cluster(*prefix: str) -> tuple[tuple[str, ...], ...]:
    return ((*prefix, "headGroupSpec", "template", "spec"), (*prefix, "workerGroupSpecs", ANY, "template", "spec"))


OPERATOR_KINDS: dict[str, OperatorKind] = {
    entry.kind: entry
    for entry in (
        _replica_kind("PyTorchJob", "pytorchReplicaSpecs"),
        _replica_kind("TFJob", "tfReplicaSpecs"),
        _replica_kind("PaddleJob", "paddleReplicaSpecs"),
        _replica_kind("XGBoostJob", "xgbReplicaSpecs"),
        _replica_kind("JAXJob", "jaxReplicaSpecs"),
        _replica_kind("MPIJob", "mpiReplicaSpecs"),
        OperatorKind("RayCluster", ("ray.io",), _ray_cluster("spec"), _RAY_CHECK),
        OperatorKind("RayJob", ("ray.io",), (*_ray_cluster("spec", "rayClusterSpec"), ("spec", "submitterPodTemplate", "spec")),
                     _RAY_CHECK),
        OperatorKind("RayService", ("ray.io",), _ray_cluster("spec", "rayClusterConfig"), _RAY_CHECK),
        OperatorKind("LeaderWorkerSet", ("leaderworkerset.x-k8s.io",),
                     (("spec", "leaderWorkerTemplate", "leaderTemplate", "spec"),
                      ("spec", "leaderWorkerTemplate", "workerTemplate", "spec")),
                     _POD_TEMPLATE_CHECK.format(operator="LeaderWorkerSet")
                     + "; leader and workers of one group each get their own claim from the template"),
        OperatorKind("JobSet", ("jobset.x-k8s.io",), (("spec", "replicatedJobs", ANY, "template", "spec", "template", "spec"),),
                     _POD_TEMPLATE_CHECK.format(operator="JobSet")),
        OperatorKind("Job", ("batch.volcano.sh",), (("spec", "tasks", ANY, "template", "spec"),),
                     _POD_TEMPLATE_CHECK.format(operator="Volcano")),
        _llm_inference("LLMInferenceService"),
        _llm_inference("LLMInferenceServiceConfig"),
        _training_runtime("TrainingRuntime"),
        _training_runtime("ClusterTrainingRuntime"),
        _hyperpod("HyperPodPyTorchJob"),
        _hyperpod("HyperPodPytorchJob"),  # the spelling of AWS's own documentation
        OperatorKind("AppWrapper", ("workload.codeflare.dev",), (), wrapped=("spec", "components"), check=(
            "the AppWrapper controller creates each component from its template as written (resourceClaims "
            "included), and the ResourceClaimTemplates must exist in the AppWrapper's namespace; check that no "
            "component's podSets count GPUs from nvidia.com/gpu limits")),
        OperatorKind("NIMService", ("apps.nvidia.com",), (("spec",),), single_container=True, check=(
            "the NIM operator gives the NIMService pods the claims of spec.draResources (resourceClaimTemplateName; "
            "every request of the claim reaches the model container); check that your NIM operator version has "
            "draResources, and that nothing in it still counts GPUs from spec.resources")),
        OperatorKind("SparkApplication", ("sparkoperator.k8s.io",), (), convert=False, check=_SPARK_CHECK),
        OperatorKind("ScheduledSparkApplication", ("sparkoperator.k8s.io",), (), convert=False, check=_SPARK_CHECK),
        OperatorKind("InferenceService", ("serving.kserve.io",), (), convert=False, check=(
            "KServe's predictor is its own copy of the pod spec fields and the Knative (serverless) mode rejects "
            "pod fields it does not allow, so resourceClaims may be dropped or refused; not converted. Use "
            "--strategy extended-resource, or a RawDeployment predictor whose KServe version passes resourceClaims")),
        OperatorKind("TrainJob", ("trainer.kubeflow.org",), (), convert=False, check=(
            "a TrainJob asks for devices in spec.trainer.resourcesPerNode and has no pod-level resourceClaims; "
            "not converted. Put the claim in the (Cluster)TrainingRuntime's JobSet template, or use "
            "--strategy extended-resource")),
        OperatorKind("Workflow", ("argoproj.io",), (), convert=False, check=(
            "Argo templates hold containers, not pod specs, so there is no place for pod resourceClaims; not "
            "converted. Add them through the template's podSpecPatch, or use --strategy extended-resource")),
        OperatorKind("WorkflowTemplate", ("argoproj.io",), (), convert=False, check=(
            "Argo templates hold containers, not pod specs; not converted. Use podSpecPatch or "
            "--strategy extended-resource")),
        OperatorKind("CronWorkflow", ("argoproj.io",), (), convert=False, check=(
            "Argo templates hold containers, not pod specs; not converted. Use podSpecPatch or "
            "--strategy extended-resource")),
    )
}


def operator_kind(obj: Mapping[str, Any]) -> OperatorKind | None:
    """The table entry for `obj`, matched on kind and API group (a Volcano Job is not a batch/v1 Job)."""
    entry = OPERATOR_KINDS.get(str(obj.get("kind", "")))
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    if entry is None or group not in entry.groups:
        return None
    return entry


def _role(key: str | int, node: Any) -> str:
    if isinstance(key, str):
        return key.lower()
    if isinstance(node, Mapping):
        return str(node.get("name") or node.get("groupName") or key)
    return str(key)


def _walk(node: Any, path: tuple[str, ...], keys: tuple[str | int, ...], roles: tuple[str, ...]) -> Iterator[PodSpecAt]:
    if not path:
        if isinstance(node, Mapping):
            yield PodSpecAt(keys, "-".join(roles), node)
        return
    head, rest = path[0], path[1:]
    if head != ANY:
        if isinstance(node, Mapping) and head in node:
            yield from _walk(node[head], rest, (*keys, head), roles)
        return
    children: list[tuple[str | int, Any]] = []
    if isinstance(node, Mapping):
        children = [(str(key), value) for key, value in node.items()]
    elif isinstance(node, list):
        children = list(enumerate(node))
    for key, child in children:
        yield from _walk(child, rest, (*keys, key), (*roles, _role(key, child)))


def pod_specs(entry: OperatorKind, obj: Mapping[str, Any]) -> list[PodSpecAt]:
    """Every pod spec of `obj` at the entry's paths, each with its role (`head`, `worker`, `gpu-workers`)."""
    found: list[PodSpecAt] = []
    for path in entry.pod_specs:
        for at in _walk(obj, path, (), ()):
            role = at.role if ANY in path else _named_role(path) if len(entry.pod_specs) > 1 else ""
            found.append(PodSpecAt(at.keys, role, at.pod_spec))
    return found


_NOT_ROLES = frozenset({"spec", "template", "rayClusterSpec", "rayClusterConfig", "leaderWorkerTemplate"})


def _named_role(path: tuple[str, ...]) -> str:
    """A fixed path's role from its telling keys: headGroupSpec -> head, prefill.worker -> prefill-worker."""
    names = []
    for key in path:
        if key in _NOT_ROLES:
            continue
        for suffix in ("GroupSpec", "PodTemplate", "Template"):
            key = key.removesuffix(suffix)
        names.append(key.lower())
    return "-".join(names) or "main"


RAY_KINDS = frozenset({"RayCluster", "RayJob", "RayService"})
RAY_GPUS = "num-gpus"


def ray_group(obj: Mapping[str, Any], keys: tuple[str | int, ...]) -> Any | None:
    """The head or worker group spec holding the pod template at `keys` (its `rayStartParams`), else None."""
    if obj.get("kind") not in RAY_KINDS or keys[-2:] != ("template", "spec") or "submitterPodTemplate" in keys:
        return None
    node: Any = obj
    for key in keys[:-2]:
        node = node[key]
    return node if isinstance(node, Mapping) else None
