"""The tolerations a pod loses when it stops requesting an extended resource.

Clusters running the ExtendedResourceToleration admission plugin (GKE does) taint
their accelerator nodes `<resource>:NoSchedule` and add the matching toleration
`{key: <resource>, operator: Exists, effect: NoSchedule}` only to pods whose
containers request `<resource>`. A migrated pod asks for a claim instead, gets no
toleration and would stay Pending on those nodes; so the migration writes the
toleration the plugin would have added, once, unless one already tolerates the taint.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from ruamel.yaml.comments import CommentedSeq

from dra_driver.migrate.edit import to_ruamel

EFFECT = "NoSchedule"


def admission_toleration(resource: str) -> dict[str, str]:
    """The toleration ExtendedResourceToleration adds for a pod requesting `resource`."""
    return {"key": resource, "operator": "Exists", "effect": EFFECT}


def tolerates(toleration: Any, resource: str) -> bool:
    """Whether `toleration` already tolerates every `<resource>:NoSchedule` taint, whatever its value."""
    if not isinstance(toleration, Mapping) or toleration.get("operator") != "Exists":
        return False
    key = toleration.get("key") or ""
    effect = toleration.get("effect") or ""
    return key in ("", resource) and effect in ("", EFFECT)


def add_missing(pod_spec: MutableMapping[str, Any], resources: list[str]) -> list[str]:
    """Append the admission toleration for each of `resources` the pod spec does not tolerate yet; returns those added."""
    existing = pod_spec.get("tolerations")
    present = existing if isinstance(existing, list) else []
    added = [r for r in dict.fromkeys(resources) if not any(tolerates(t, r) for t in present)]
    if not added:
        return []
    entries = [to_ruamel(admission_toleration(r)) for r in added]
    if isinstance(existing, list):
        existing.extend(entries)
    else:
        pod_spec["tolerations"] = CommentedSeq(entries)
    return added
