"""Build a kubernetes ApiClient: from a base URL, a kubeconfig, or the in-cluster service account.

The driver runs in a pod (in-cluster config); `demo` and the tests point it at
the simulated API server by URL; a developer laptop uses a kubeconfig.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client, config

from dra_driver.errors import DraError

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


class KubeConfigError(DraError):
    """No usable way to reach an API server."""


def configuration_for_url(base_url: str) -> client.Configuration:
    """A configuration for a plain base URL (the simulated API server, `kubectl proxy`)."""
    if not base_url.startswith(("http://", "https://")):
        raise KubeConfigError(f"API server URL {base_url!r} must start with http:// or https://")
    configuration = client.Configuration(host=base_url.rstrip("/"))
    return configuration


def load_configuration(base_url: str | None = None, kubeconfig: str | None = None, context: str | None = None) -> client.Configuration:
    """The first that applies: an explicit URL, an explicit kubeconfig, in-cluster, $KUBECONFIG / ~/.kube/config."""
    if base_url:
        return configuration_for_url(base_url)
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
        return configuration
    if os.environ.get("KUBERNETES_SERVICE_HOST") and IN_CLUSTER_TOKEN.exists():
        config.load_incluster_config(client_configuration=configuration)
        return configuration
    default = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    if Path(default.split(os.pathsep)[0]).exists():
        config.load_kube_config(config_file=default, context=context, client_configuration=configuration)
        return configuration
    raise KubeConfigError(
        "cannot reach an API server: not running in a pod (no KUBERNETES_SERVICE_HOST/service-account token) "
        f"and no kubeconfig at {default}; pass --kubeconfig or an API server URL"
    )


def make_api_client(base_url: str | None = None, kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An ApiClient ready for ResourceV1Api / CoreV1Api."""
    return client.ApiClient(load_configuration(base_url, kubeconfig, context))
