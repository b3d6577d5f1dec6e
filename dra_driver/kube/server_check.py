"""Whether an API server can be used by dra-driver: reachable, accepting the credentials, serving resource.k8s.io/v1.

One quick request (`GET /apis/resource.k8s.io`, short connect timeout, no urllib3 retries) before
a command lists or publishes anything, so a wrong cluster is one line naming the server and what is
missing, not a 404 from the middle of a LIST, retry warnings, or a daemon retrying forever.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dra_driver.common.errors import DraError
from dra_driver.kube.api_source import IN_CLUSTER_TOKEN, USER_AGENT, ApiSource

if TYPE_CHECKING:  # the kubernetes client is loaded only where a check goes through it
    from dra_driver.kube.client import JsonApi

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


Fetch = Callable[[str], "tuple[int, bytes]"]  # GET path -> (HTTP status, body); raises on a connection failure


def check_dra_served(api: JsonApi, server: str) -> None:
    """Raise ClusterError unless `server` (reached through `api`) serves resource.k8s.io/v1."""
    from dra_driver.kube.k8s import ApiException

    def fetch(path: str) -> tuple[int, bytes]:
        try:
            response = api.send("GET", path, timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S))
            response.read()
        except ApiException as exc:  # the client raises for some statuses itself
            return int(exc.status or 0), exc.body.encode() if isinstance(exc.body, str) else (exc.body or b"")
        return int(response.status), response.data or b""

    check_with(fetch, server)


def plain_fetch(base_url: str, token: str | None = None, ca_file: str | None = None) -> Fetch:
    """GET over the standard library: for a URL or the in-cluster service account, where `run` checks the server
    before it serves anything and importing the kubernetes client would delay its registration."""
    import http.client
    import ssl
    from urllib.parse import urlsplit

    parts = urlsplit(base_url)

    def fetch(path: str) -> tuple[int, bytes]:
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=ca_file)
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(parts.netloc, timeout=CONNECT_TIMEOUT_S, context=context)
        else:
            connection = http.client.HTTPConnection(parts.netloc, timeout=CONNECT_TIMEOUT_S)
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT, **({"Authorization": f"Bearer {token}"} if token else {})}
        try:
            connection.request("GET", parts.path.rstrip("/") + path, headers=headers)
            response = connection.getresponse()
            return response.status, response.read(1 << 20)
        finally:
            connection.close()

    return fetch


def check_source(source: ApiSource) -> None:
    """Check the server of `source`: over the standard library for a URL or in-cluster (no kubernetes client
    import), through the client's kubeconfig loader (auth plugins, client certificates) for a kubeconfig."""
    if source.kind == "url":
        check_with(plain_fetch(source.location), source.location)
        return
    if source.kind == "in-cluster":
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        url = f"https://{f'[{host}]' if ':' in host else host}:{port}"
        ca_file = IN_CLUSTER_TOKEN.with_name("ca.crt")
        token = IN_CLUSTER_TOKEN.read_text().strip()
        check_with(plain_fetch(url, token, str(ca_file) if ca_file.exists() else None), f"{url} (in-cluster service account)")
        return

    from dra_driver.kube.client import JsonApi, load_configuration, server_label

    configuration = without_retries(load_configuration(source=source))
    with JsonApi(configuration) as api:
        check_dra_served(api, server_label(source, configuration))


def check_with(fetch: Fetch, server: str) -> None:
    """Raise ClusterError unless `fetch` reaches a server that serves resource.k8s.io/v1 (one request)."""
    try:
        status, body = fetch(f"/apis/{GROUP}")
    except Exception as exc:  # connection refused, DNS, TLS, timeout: many types, one meaning
        raise ClusterError(server, "unreachable", f"unreachable ({_cause(exc)}); check the server address, the network, or --context") from exc
    if status in (401, 403):
        raise ClusterError(server, "unauthorized", f"refused the credentials (HTTP {status}); check the kubeconfig user or the context")
    if status == 404:
        raise ClusterError(
            server, "dra-not-enabled", f"does not serve the {GROUP} API: DRA is not enabled (Kubernetes 1.34+ serves {GROUP}/{VERSION} by default)"
        )
    if not 200 <= status <= 299:
        raise ClusterError(server, "unreachable", f"answered HTTP {status} to GET /apis/{GROUP}")
    versions = _served_versions(body)
    if VERSION not in versions:
        served = ", ".join(f"{GROUP}/{v}" for v in versions) or "no version"
        raise ClusterError(
            server, "wrong-version", f"serves {served}, not {GROUP}/{VERSION}: dra-driver needs Kubernetes 1.34 or newer (1.35 recommended)"
        )


def _cause(exc: BaseException) -> str:
    """The innermost reason of a connection error, without urllib3's pool and retry wrapping."""
    reason = getattr(exc, "reason", None)
    while isinstance(reason, BaseException):
        inner = getattr(reason, "reason", None)
        if inner is None or inner is reason:
            break
        reason = inner
    text = str(reason or exc)
    if ": " in text and text.startswith("<"):  # '<urllib3.connection.HTTPConnection object at 0x..>: Failed to ...'
        text = text.split(": ", 1)[1]
    return " ".join(text.split())[:200]
