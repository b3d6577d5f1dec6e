"""Build a kubernetes ApiClient: from a base URL, a kubeconfig, or the in-cluster service account.

The driver runs in a pod (in-cluster config); `demo` and the tests point it at
the simulated API server by URL; a developer laptop uses a kubeconfig.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from dra_driver import __version__
from dra_driver.kube.api_source import IN_CLUSTER_TOKEN, KubeConfigError, api_source

__all__ = [
    "IN_CLUSTER_TOKEN", "USER_AGENT", "JsonApi", "KubeConfigError", "WatchStream", "api_client_for", "configuration_for_url",
    "load_configuration", "make_api_client",
]  # fmt: skip

# Sent with every request, so an operator can tell this driver's traffic apart in the API server's audit log and
# metrics (the generated client's default is "OpenAPI-Generator/<client version>/python").
USER_AGENT = f"dra-driver/{__version__}"


def configuration_for_url(base_url: str) -> client.Configuration:
    """A configuration for a plain base URL (the simulated API server, `kubectl proxy`)."""
    source = api_source(base_url=base_url)
    return client.Configuration(host=source.location.rstrip("/"))


def load_configuration(base_url: str | None = None, kubeconfig: str | None = None, context: str | None = None) -> client.Configuration:
    """The first that applies: an explicit URL, an explicit kubeconfig, in-cluster, $KUBECONFIG / ~/.kube/config."""
    source = api_source(base_url, kubeconfig)
    if source.kind == "url":
        return configuration_for_url(source.location)
    configuration = client.Configuration()
    if source.kind == "in-cluster":
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(config_file=source.location, context=context, client_configuration=configuration)
    return configuration


def api_client_for(configuration: client.Configuration) -> client.ApiClient:
    """The ApiClient every part of the driver uses: `configuration`'s server and auth, our User-Agent."""
    api_client = client.ApiClient(configuration)
    api_client.user_agent = USER_AGENT
    return api_client


def make_api_client(base_url: str | None = None, kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An ApiClient ready for ResourceV1Api / CoreV1Api."""
    return api_client_for(load_configuration(base_url, kubeconfig, context))


class JsonApi:
    """Plain-JSON requests through a kubernetes ApiClient: same host, auth, TLS and urllib3 retries, no typed models.

    The generated methods turn a dict body into pydantic models and back before
    sending it; for a 64-device ResourceSlice that costs tens of milliseconds per
    request, and the typed models would also drop fields newer than the client.
    The publisher writes whole slices often enough (every repair) to avoid both.
    """

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client

    def _send(self, method: str, path: str, query: Mapping[str, str] | None, body: Any) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        params = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        return self.api_client.call_api(*params)

    @staticmethod
    def _raise_for_status(response: Any) -> None:
        if not 200 <= response.status <= 299:
            response.read()
            text = response.data.decode("utf-8", "replace") if response.data else None
            raise ApiException.from_response(http_resp=response, body=text, data=None)

    def request(self, method: str, path: str, query: Mapping[str, str] | None = None, body: Any = None) -> dict[str, Any]:
        """One request; the decoded JSON answer, or ApiException carrying the server's Status."""
        response = self._send(method, path, query, body)
        self._raise_for_status(response)
        response.read()
        decoded: dict[str, Any] = json.loads(response.data) if response.data else {}
        return decoded

    def watch(self, path: str, query: Mapping[str, str]) -> WatchStream:
        """Open a watch (`?watch=true` is added); iterate the returned stream for raw events."""
        response = self._send("GET", path, {**query, "watch": "true"}, None)
        self._raise_for_status(response)
        return WatchStream(response.response)


class WatchStream:
    """Raw watch events ({"type", "object"}) as dicts; ERROR events raise ApiException (410 = expired)."""

    def __init__(self, response: Any) -> None:
        self._response = response

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from kubernetes.watch.watch import iter_resp_lines

        try:
            for line in iter_resp_lines(self._response):
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise ApiException(status=int(status.get("code") or 500), reason=f"{status.get('reason')}: {status.get('message')}")
                yield event
        finally:
            self.close()

    def stop(self) -> None:
        """Unblock a reader in another thread by shutting the socket down (closing alone may not wake it)."""
        connection = getattr(self._response, "connection", None)
        sock = getattr(connection, "sock", None) if connection else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        try:
            self._response.close()
            self._response.release_conn()
        except Exception:  # closing a dead stream is best effort
            pass
