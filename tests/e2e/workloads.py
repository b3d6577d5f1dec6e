"""Workloads of the e2e tier: ResourceClaimTemplates, pods using them, and what a container really got."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .kit import IMAGE, Kit, allocated_devices

NAMESPACE = "e2e"
# Device nodes of the vendors (what a CDI spec adds); anything else in a container's /dev is the runtime's own.
VENDOR_NODE = re.compile(r"^/dev/(nvidia|kfd|dri/|accel/|infiniband/)")
PROBE = "echo @nodes; find /dev -type c | sort; echo @env; env | sort; echo @end"


def claim_template(name: str, device_class: str, count: int = 1, requests: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": f"r{i}", "exactly": {"deviceClassName": device_class, "count": count}} for i in range(requests)
                    ]
                }
            }
        },
    }


def claim_pod(name: str, template: str, node: str = "node-1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": "acc", "resourceClaimTemplateName": template}],
            "containers": [
                {
                    "name": "work",
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "infinity"],
                    "resources": {"claims": [{"name": "acc"}]},
                }
            ],
        },
    }


def extended_resource_pod(name: str, resource: str, count: int = 1, node: str = "node-1") -> dict[str, Any]:
    pod = claim_pod(name, "unused", node)
    del pod["spec"]["resourceClaims"]
    pod["spec"]["containers"][0]["resources"] = {"limits": {resource: str(count)}}
    return pod


@dataclass(frozen=True)
class Seen:
    """What a running container sees: its vendor device nodes and its environment."""

    nodes: frozenset[str]
    env: dict[str, str]


def seen_in(kit: Kit, pod: str) -> Seen:
    out = kit.exec(NAMESPACE, pod, PROBE)
    nodes_part = out.split("@nodes", 1)[1].split("@env", 1)[0]
    env_part = out.split("@env", 1)[1].split("@end", 1)[0]
    nodes = frozenset(line.strip() for line in nodes_part.splitlines() if VENDOR_NODE.match(line.strip()))
    env = dict(line.split("=", 1) for line in env_part.splitlines() if "=" in line)
    return Seen(nodes, env)


@dataclass(frozen=True)
class SpecEdits:
    """What the driver's CDI specs of one claim ask for (the claim's UID names the spec files)."""

    files: tuple[Path, ...]
    nodes: frozenset[str]
    env: dict[str, str]
    mounts: frozenset[str]


def spec_edits(cdi_dir: Path, claim_uid: str) -> SpecEdits:
    files = tuple(sorted(p for p in cdi_dir.glob("*.json") if claim_uid in p.name))
    nodes: set[str] = set()
    env: dict[str, str] = {}
    mounts: set[str] = set()
    for path in files:
        spec = json.loads(path.read_text())
        edits = [spec.get("containerEdits", {})] + [d.get("containerEdits", {}) for d in spec.get("devices", [])]
        for edit in edits:
            nodes.update(n["path"] for n in edit.get("deviceNodes", []) or [])
            env.update(e.split("=", 1) for e in edit.get("env", []) or [] if "=" in e)
            mounts.update(m["containerPath"] for m in edit.get("mounts", []) or [])
    return SpecEdits(files, frozenset(nodes), env, frozenset(mounts))


def specs_naming(cdi_dir: Path, claim_uid: str) -> list[Path]:
    return sorted(p for p in cdi_dir.iterdir() if claim_uid in p.name) if cdi_dir.is_dir() else []


def run_claim_pod(kit: Kit, pod: str, template: dict[str, Any], node: str = "node-1") -> tuple[dict[str, Any], dict[str, Any]]:
    """Template + pod applied, pod Running; its claim."""
    kit.apply([template, claim_pod(pod, template["metadata"]["name"], node)])
    running = kit.wait_pod_running(NAMESPACE, pod)
    return running, kit.claim_of(NAMESPACE, pod)


def devices_of(claim: dict[str, Any]) -> list[str]:
    return [device for _, _, device in allocated_devices(claim)]
