"""Every place an object names a device-plugin resource, so that none passes without being converted or reported.

Operators spell requests their own way: Kubeflow Trainer's `resourcesPerNode.limits`,
Spark's `executor.gpu: {name: nvidia.com/gpu, quantity: 1}`, Kueue's
`coveredResources: [nvidia.com/gpu]`, Karpenter's `limits`. A key of a `limits` or
`requests` map is a resource request whatever the domain says (`nvidia.com/foo` is an
unknown resource of a known vendor); anywhere else only exact names we know count
(`nvidia.com/gpu.product` is a node label, not a resource). Not looked at: metadata
(labels and annotations are reported on their own), `status` (observed, not asked
for), and a `key` field (a taint, toleration or selector key names a label or taint).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.backend.vocabulary import VENDOR_DOMAINS
from dra_driver.migrate.resources import DeviceKind, Unsupported, classify, is_known_resource_name

_REQUEST_MAPS = frozenset({"limits", "requests"})
_SKIPPED_KEYS = frozenset({"metadata", "status", "key"})


# A known name written as a key inside a string: a manifest kept as text (a Job in a ConfigMap's `data`), YAML or
# JSON. Comment lines of that text do not count. The domains are literal, so that a long line costs linear time.
_KEY_DOMAINS = (*VENDOR_DOMAINS, "aws.amazon.com", "google.com")
_KEY_IN_TEXT = re.compile(
    r"""(?:^|[\s{,\[])["']?((?:""" + "|".join(re.escape(d) for d in _KEY_DOMAINS) + r""")/[A-Za-z0-9._-]+)["']?[ \t]*:(?=[\s"'0-9{\[]|$)"""
)


@dataclass(frozen=True)
class Mention:
    path: str  # "spec.trainer.resourcesPerNode.limits" for a key, "spec.executor.gpu.name" for a value
    resource: str
    kind: DeviceKind | Unsupported
    embedded: bool = False  # named as a key inside a string value (a manifest kept as text), which is never rewritten


def _classified(name: str, per_profile_classes: frozenset[str]) -> DeviceKind | Unsupported:
    kind = classify(name, per_profile_classes)
    return kind if kind is not None else Unsupported(name, "device-plugin resource this tool does not know how to map")


def mentions(node: Any, per_profile_classes: frozenset[str] = frozenset(), path: str = "") -> Iterator[Mention]:
    """Device-plugin resources named below `node`: as keys of request maps, or as exact names anywhere else."""
    if isinstance(node, Mapping):
        request_map = path.rstrip(".").rsplit(".", 1)[-1] in _REQUEST_MAPS
        for key, value in node.items():
            name = str(key)
            if name in _SKIPPED_KEYS:
                continue
            if (request_map and classify(name) is not None) or is_known_resource_name(name):
                yield Mention(path.rstrip("."), name, _classified(name, per_profile_classes))
            yield from mentions(value, per_profile_classes, f"{path}{name}.")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from mentions(value, per_profile_classes, f"{path.rstrip('.')}[{index}].")
    elif isinstance(node, str) and is_known_resource_name(node):
        yield Mention(path.rstrip("."), node, _classified(node, per_profile_classes))
    elif isinstance(node, str) and ":" in node:
        for name in names_in_text(node):
            yield Mention(path.rstrip("."), name, _classified(name, per_profile_classes), embedded=True)


def names_in_text(text: str) -> list[str]:
    """Known device-plugin names written as keys in `text` (`nvidia.com/gpu: 1`, `"amd.com/gpu": 8`), once each."""
    found: dict[str, None] = {}
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for match in _KEY_IN_TEXT.finditer(line):
            if is_known_resource_name(match[1]):
                found[match[1]] = None
    return list(found)


def is_dra_object(obj: Mapping[str, Any]) -> bool:
    """DRA's own objects name extended resources on purpose (a DeviceClass's extendedResourceName)."""
    return str(obj.get("apiVersion", "")).startswith("resource.k8s.io/")
