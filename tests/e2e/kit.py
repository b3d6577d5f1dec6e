"""The loopback Kubernetes kit the e2e tier drives (docs/e2e.md): its scripts, kubectl, and waits on the real cluster.

`DRA_KIT` names the directory the kit's install script filled (`bin/`, `up.sh`, `down.sh`, `kubelet-up.sh`,
`node2-up.sh`, the kubeconfigs); CRI_HOME (node-2's home) defaults to the kit's own default. Nothing here is
product code: it starts and stops what a test needs and reads what the real components report.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import eventually

KIT_ENV = "DRA_KIT"
SCRIPTS = ("up.sh", "down.sh", "kubelet-up.sh", "kubelet-down.sh", "node2-up.sh", "node2-down.sh", "kubeconfig")
BINARIES = ("kube-apiserver", "kubelet", "kubectl", "containerd")
IMAGE = "ghcr.io/dra-driver/dra-driver:0.1.0"  # scripts/build_image.sh's tag; also the workloads' image (it has sh)
# kubelet-side defaults of the gates some tests need (pkg/features/kube_features.go of 1.35.6 and 1.36.2)
KUBELET_GATE_DEFAULTS = {
    "1.35": {"ResourceHealthStatus": False, "DRAExtendedResource": False},
    "1.36": {"ResourceHealthStatus": True, "DRAExtendedResource": True},
}


def kit_problem(value: str | None) -> str | None:
    """Why no kit can be used, or None."""
    if not value:
        return f"${KIT_ENV} is not set: the e2e tier needs the loopback kit (docs/e2e.md)"
    home = Path(value)
    missing = [name for name in SCRIPTS if not (home / name).exists()] + [f"bin/{b}" for b in BINARIES if not (home / "bin" / b).exists()]
    if missing:
        return f"${KIT_ENV}={value} is not an installed kit: missing {', '.join(missing)}"
    if os.geteuid() != 0:
        return "the e2e tier needs root (the kit's nodes use mount namespaces, containerd and cgroups)"
    return None


@dataclass
class Kit:
    home: Path
    cri_home: Path = field(default_factory=lambda: Path(os.environ.get("CRI_HOME", "/tmp/k8s-cri")))
    openapi_broken: bool = False  # set when kubectl could not read the server's OpenAPI (see _apply)

    @property
    def kubeconfig(self) -> Path:
        return self.home / "kubeconfig"

    @property
    def node1_kubelet_dir(self) -> Path:
        return self.home / "kubelet-root"

    @property
    def node1_cdi_dir(self) -> Path:
        return self.home / "kubelet-aux" / "cdi"

    @property
    def node2_kubelet_dir(self) -> Path:
        """node-2's /var/lib/kubelet as the host sees it."""
        return self.cri_home / "var-lib-kubelet-node-2"

    def log(self, node: str, name: str = "kubelet.log") -> Path:
        return (self.home / "logs" if node == "node-1" else self.cri_home / "logs") / name

    def env(self) -> dict[str, str]:
        return {**os.environ, "K8S_HOME": str(self.home), "CRI_HOME": str(self.cri_home)}

    def script(self, name: str, *args: str, timeout: float = 300, extra_env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            [str(self.home / name), *args], env={**self.env(), **(extra_env or {})}, capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise AssertionError(f"{name} {' '.join(args)} failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
        return done.stdout

    def kubectl_command(self, *args: str) -> list[str]:
        """The kit's kubectl with the kit's kubeconfig, for a process that keeps running (port-forward)."""
        return [str(self.home / "bin" / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args]

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.kubectl_command(*args), input=stdin, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
        return done

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, manifest: str | Sequence[dict[str, Any]]) -> None:
        text = manifest if isinstance(manifest, str) else json.dumps({"apiVersion": "v1", "kind": "List", "items": list(manifest)})
        self._apply("-f", "-", stdin=text)

    def apply_k(self, directory: Path) -> None:
        self._apply("-k", str(directory))

    def _apply(self, *args: str, stdin: str | None = None) -> None:
        """kubectl apply; kubectl's client-side validation skipped when the server's OpenAPI is unusable.

        The kit's v1.36.2 build serves OpenAPI documents kubectl cannot read (`"Extensions":null`, the
        spec types marshalled without their own JSON methods): kubectl then refuses every apply with
        "failed to download openapi". The API server still validates each object itself."""
        validate = ("--validate=false",) if self.openapi_broken else ()
        done = self.kubectl("apply", *validate, *args, stdin=stdin, check=False)
        if (
            done.returncode != 0
            and not validate
            and "error validating" in done.stderr
            and ("openapi" in done.stderr or "unable to handle the request" in done.stderr)
        ):
            self.openapi_broken = True
            done = self.kubectl("apply", "--validate=false", *args, stdin=stdin, check=False)
        if done.returncode != 0:
            raise AssertionError(f"kubectl apply {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")

    def version(self) -> str:
        return str(json.loads(self.kubectl("version", "-o", "json").stdout)["serverVersion"]["gitVersion"])

    def kubelet_version(self, node: str) -> str:
        return str(self.get("node", node)["status"]["nodeInfo"]["kubeletVersion"])

    def kubelet_gate(self, node: str, gate: str) -> bool:
        """Whether the node's kubelet runs with `gate` on: its KubeletConfiguration's featureGates, else the
        default of its release (KUBELET_GATE_DEFAULTS)."""
        config = (self.home if node == "node-1" else self.cri_home) / f"{node}-kubelet.yaml"
        gates = (yaml.safe_load(config.read_text()) or {}).get("featureGates") or {}
        if gate in gates:
            return bool(gates[gate])
        release = ".".join(self.kubelet_version(node).lstrip("v").split(".")[:2])
        return KUBELET_GATE_DEFAULTS.get(release, {}).get(gate, False)

    def require_kubelet_gate(self, node: str, gate: str, why: str) -> None:
        """Skip the calling test, with the reason, where the node's kubelet cannot do what it checks."""
        if not self.kubelet_gate(node, gate):
            pytest.skip(f"{node}'s kubelet {self.kubelet_version(node)} runs with {gate} off (its release's default): {why}")

    # --- what the cluster says ---------------------------------------------------------------

    def slices(self, node: str, driver: str | None = None) -> list[dict[str, Any]]:
        items = self.get("resourceslices", "--field-selector", f"spec.nodeName={node}")["items"]
        return [s for s in items if driver is None or s["spec"]["driver"] == driver]

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        done = self.kubectl("-n", namespace, "get", "pod", name, "-o", "json", check=False)
        return json.loads(done.stdout) if done.returncode == 0 else None

    def wait_pod_running(self, namespace: str, name: str, timeout: float = 120) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            pod = self.pod(namespace, name)
            if pod is None:
                return None
            phase = pod.get("status", {}).get("phase")
            if phase in ("Failed", "Succeeded"):
                raise AssertionError(f"pod {namespace}/{name} ended {phase}: {json.dumps(pod.get('status'))[:2000]}")
            return pod if phase == "Running" else None

        try:
            return eventually(running, f"pod {namespace}/{name} Running", timeout, step=0.25)
        except AssertionError as err:
            events = self.kubectl("-n", namespace, "get", "events", "--field-selector", f"involvedObject.name={name}", check=False).stdout
            raise AssertionError(f"{err}\nevents:\n{events[-3000:]}") from None

    def wait_pod_gone(self, namespace: str, name: str, timeout: float = 120) -> None:
        eventually(lambda: self.pod(namespace, name) is None, f"pod {namespace}/{name} gone", timeout, step=0.25)

    def exec(self, namespace: str, pod: str, command: str) -> str:
        return self.kubectl("-n", namespace, "exec", pod, "--", "sh", "-c", command).stdout

    def claim_of(self, namespace: str, pod: str) -> dict[str, Any]:
        """The single generated ResourceClaim of a pod (from its status)."""
        status = self.get("-n", namespace, "pod", pod)["status"].get("resourceClaimStatuses", [])
        assert len(status) == 1, f"pod {pod} has {len(status)} claims: {status}"
        return self.get("-n", namespace, "resourceclaim", status[0]["resourceClaimName"])

    def kubelet_log_lines(self, node: str, pattern: str) -> list[str]:
        path = self.log(node)
        if not path.exists():
            return []
        regex = re.compile(pattern)
        with path.open(errors="replace") as f:
            return [line for line in f if regex.search(line)]


def allocated_devices(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of each allocation result."""
    results = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
    return [(r["driver"], r["pool"], r["device"]) for r in results]
