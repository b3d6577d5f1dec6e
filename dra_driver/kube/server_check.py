"""Whether an API server can be used by dra-driver: reachable, accepting the credentials, serving resource.k8s.io/v1.

One quick request (`GET /apis/resource.k8s.io`, short connect timeout, no urllib3 retries) before
a command lists or publishes anything, so a wrong cluster is one line naming the server and what is
missing, not a 404 from the middle of a LIST, retry warnings, or a daemon retrying forever.
"""

from __future__ import annotations

import json
from typing import Any

from dra_driver.errors import DraError

GROUP = "resource.k8s.io"
VERSION = "v1"
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 15.0


class ClusterError(DraError):
    """The API server cannot be used; `reason` is one of unreachable, unauthorized, dra-not-enabled, wrong-version."""

    def __init__(self, server: str, reason: str, text: str) -> None:
        self.server = server
        self.reason = reason
        super().__init__(f"API server {server}: {text}")

    @property
    def permanent(self) -> bool:
        """True when waiting will not help (the cluster lacks the API); False for an outage or credentials."""
        return self.reason in ("dra-not-enabled", "wrong-version")


def without_retries(configuration: Any) -> Any:
    """A client configuration that fails fast: urllib3's retries (three warnings, seconds) are off."""
    configuration.retries = 0
    return configuration


def _served_versions(body: bytes) -> list[str]:
    try:
        group = json.loads(body)
    except ValueError:
        return []
    versions = group.get("versions") if isinstance(group, dict) else None
    return [str(v.get("version")) for v in versions or [] if isinstance(v, dict)]


def check_dra_served(api_client: Any, server: str) -> None:
    """Raise ClusterError unless `server` answers and serves resource.k8s.io/v1."""
    from kubernetes.client.rest import ApiException

    try:
        params = api_client.param_serialize(method="GET", resource_path=f"/apis/{GROUP}", header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
        response = api_client.call_api(*params, _request_timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S))
        response.read()
    except ApiException as exc:  # the client raises for some statuses itself
        status, body = int(exc.status or 0), (exc.body or "").encode() if isinstance(exc.body, str) else (exc.body or b"")
    except Exception as exc:  # connection refused, DNS, TLS, timeout: many types, one meaning
        raise ClusterError(server, "unreachable", f"unreachable ({_cause(exc)}); check the server address, the network, or --context") from exc
    else:
        status, body = int(response.status), response.data or b""
    if status in (401, 403):
        raise ClusterError(server, "unauthorized", f"refused the credentials (HTTP {status}); check the kubeconfig user or the context")
    if status == 404:
        raise ClusterError(server, "dra-not-enabled", f"does not serve the {GROUP} API: DRA is not enabled (Kubernetes 1.34+ serves {GROUP}/{VERSION} by default)")
    if not 200 <= status <= 299:
        raise ClusterError(server, "unreachable", f"answered HTTP {status} to GET /apis/{GROUP}")
    versions = _served_versions(body)
    if VERSION not in versions:
        served = ", ".join(f"{GROUP}/{v}" for v in versions) or "no version"
        raise ClusterError(server, "wrong-version", f"serves {served}, not {GROUP}/{VERSION}: dra-driver needs Kubernetes 1.34 or newer (1.35 recommended)")


def _cause(exc: BaseException) -> str:
    """The innermost reason of a connection error, without urllib3's pool and retry wrapping."""
    reason = getattr(exc, "reason", None)
    while isinstance(reason, BaseException) and getattr(reason, "reason", None) is not None and reason is not reason.reason:
        reason = reason.reason
    text = str(reason or exc)
    if ": " in text and text.startswith("<"):  # '<urllib3.connection.HTTPConnection object at 0x..>: Failed to ...'
        text = text.split(": ", 1)[1]
    return " ".join(text.split())[:200]
