"""Where the API server is: an explicit URL, a kubeconfig, or the in-cluster service account.

Decided from flags, environment and files alone, without the kubernetes client:
`dra-driver run` checks it before it serves any socket (so a node with nowhere
to connect fails at once, naming the fix) and builds the client only later
(dra_driver.kube.client), when its sockets already serve.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dra_driver.errors import DraError

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


class KubeConfigError(DraError):
    """No usable way to reach an API server."""


@dataclass(frozen=True)
class ApiSource:
    kind: Literal["url", "kubeconfig", "in-cluster"]
    location: str = ""  # the URL or the kubeconfig file


def api_source(base_url: str | None = None, kubeconfig: str | None = None) -> ApiSource:
    """The first that applies: an explicit URL, an explicit kubeconfig, in-cluster, $KUBECONFIG / ~/.kube/config."""
    if base_url:
        if not base_url.startswith(("http://", "https://")):
            raise KubeConfigError(f"API server URL {base_url!r} must start with http:// or https://")
        return ApiSource("url", base_url)
    if kubeconfig:
        if not Path(kubeconfig).is_file():
            raise KubeConfigError(f"kubeconfig {kubeconfig} does not exist or is not a file; pass an existing --kubeconfig")
        return ApiSource("kubeconfig", kubeconfig)
    if os.environ.get("KUBERNETES_SERVICE_HOST") and IN_CLUSTER_TOKEN.exists():
        return ApiSource("in-cluster")
    default = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if Path(default.split(os.pathsep)[0]).exists():
        return ApiSource("kubeconfig", default)
    raise KubeConfigError(
        "cannot reach an API server: not running in a pod (no KUBERNETES_SERVICE_HOST/service-account token) "
        f"and no kubeconfig at {default}; pass --kubeconfig or an API server URL"
    )
