"""What `nvidia.com/gpu` means on the nodes a pod selects: a whole GPU, a MIG device, or a time-sliced replica.

gpu-feature-discovery rewrites `nvidia.com/gpu.product` to say how the device
plugin advertises the node's GPUs:
- `<model>-MIG-<profile>` (e.g. `A100-SXM4-40GB-MIG-1g.5gb`): MIG *single*
  strategy, where every `nvidia.com/gpu` is one MIG device of that profile;
- `<model>-SHARED` (e.g. `Tesla-T4-SHARED`): time-slicing without
  renameByDefault, where every `nvidia.com/gpu` is a *replica* of a GPU that
  other pods share.
A pod that selects such nodes and asks for `nvidia.com/gpu` is converted by
that meaning (MIG) or not at all (shared): it must never silently become a
request for whole, exclusive GPUs.
"""

from __future__ import annotations

import re
from dataclasses import replace
from collections.abc import Iterator, Mapping
from typing import Any

from dra_driver.migrate.resources import DeviceKind, Unsupported, classify

PRODUCT_LABEL = "nvidia.com/gpu.product"
STRATEGY_LABEL = "nvidia.com/mig.strategy"
GPU = "nvidia.com/gpu"
_MIG_PRODUCT = re.compile(r"-MIG-(?P<profile>\d+g\.\d+gb)$")
_AFFINITY = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")

SHARED_REASON = (
    "the pod selects time-sliced GPUs ({label}={value}): with the device plugin every nvidia.com/gpu there is a "
    "replica that other pods share, while a DRA request gets whole GPUs for itself. Not converted, so it is never "
    "silently made exclusive; to share a GPU with DRA, reference one ResourceClaim (not a template) from the pods "
    "that share it and give it a GpuConfig with sharing.strategy TimeSlicing (docs/migration.md, 'Time-sliced GPUs')"
)


def _selected_values(pod_spec: Mapping[str, Any], label: str) -> Iterator[str]:
    """Every value of `label` the pod's required placement (nodeSelector, required affinity `In`) names."""
    selector = pod_spec.get("nodeSelector")
    if isinstance(selector, Mapping) and label in selector:
        yield str(selector[label])
    node: Any = pod_spec
    for key in _AFFINITY:
        node = node.get(key) if isinstance(node, Mapping) else None
    for term in node if isinstance(node, list) else []:
        expressions = term.get("matchExpressions") if isinstance(term, Mapping) else None
        for expression in expressions if isinstance(expressions, list) else []:
            if isinstance(expression, Mapping) and expression.get("key") == label and expression.get("operator") == "In":
                yield from (str(value) for value in expression.get("values") or [])


def gpu_meaning(pod_spec: Mapping[str, Any], per_profile_classes: frozenset[str]) -> DeviceKind | Unsupported | None:
    """What `nvidia.com/gpu` asks for in this pod; None when it is a whole GPU (no MIG or sharing label selected)."""
    products = list(_selected_values(pod_spec, PRODUCT_LABEL))
    shared = [value for value in products if value.endswith("-SHARED")]
    if shared:
        return Unsupported(GPU, SHARED_REASON.format(label=PRODUCT_LABEL, value=shared[0]))
    profiles = {match["profile"] for value in products if (match := _MIG_PRODUCT.search(value))}
    if len(profiles) == 1 and all(_MIG_PRODUCT.search(value) for value in products):
        kind = classify(f"nvidia.com/mig-{profiles.pop()}", per_profile_classes)
        assert isinstance(kind, DeviceKind)  # _MIG_PRODUCT only matches profiles classify knows
        return replace(kind, resource=GPU)  # the container's key stays nvidia.com/gpu
    if profiles or "single" in _selected_values(pod_spec, STRATEGY_LABEL):
        return Unsupported(GPU, (
            f"the pod selects MIG single-strategy nodes ({PRODUCT_LABEL} {sorted(set(products))}), where "
            "nvidia.com/gpu is a MIG device, but not one profile this tool can tell; ask for "
            "nvidia.com/mig-<profile> (or select one <model>-MIG-<profile> product) and run again"))
    return None
