"""Reach the API server: a client configuration from a base URL, a kubeconfig (merged, with its context, as kubectl),
or in-cluster; the daemon's plain-JSON transport on it (JsonApi), and the tools' typed ApiClient.

The driver runs in a pod (in-cluster config); `demo` and the tests point it at
the simulated API server by URL; a developer laptop uses a kubeconfig.
"""

from __future__ import annotations

import json
import logging
import socket
from dataclasses import replace
from collections.abc import Iterator, Mapping
from typing import Any, cast
from urllib.parse import quote, urlencode

from dra_driver.common import suggest
from dra_driver.common.logs import fields
from dra_driver.kube.api_source import IN_CLUSTER_TOKEN, USER_AGENT, ApiSource, KubeConfigError, api_source
from dra_driver.kube.k8s import ApiException, Configuration, client
from dra_driver.kube.watch_lines import READ_BYTES, watch_lines

__all__ = [
    "IN_CLUSTER_TOKEN", "USER_AGENT", "ApiSource", "JsonApi", "KubeConfigError", "WatchStream", "api_client_for",
    "cached_list_query", "chosen_context", "configuration_for_url", "load_configuration", "make_api_client", "make_json_api",
    "newer_version", "server_label", "too_large_version",
]  # fmt: skip

# A request timeout as the kubernetes client takes it: seconds, or (connect, read) seconds; None: its default.
Timeout = float | tuple[float, float] | None


def configuration_for_url(base_url: str) -> Configuration:
    """A configuration for a plain base URL (the simulated API server, `kubectl proxy`)."""
    source = api_source(base_url=base_url)
    return Configuration(host=source.location.rstrip("/"))


def _kubeconfig_documents(source: ApiSource) -> list[dict[str, Any]]:
    """Each kubeconfig file, read through the input layer first: the client's own loader has no size, depth or alias limit."""
    from dra_driver.ingest import read_documents

    from dra_driver.ingest import InputError

    contents = []
    for path in source.files:
        try:
            documents = read_documents(path)
        except InputError as exc:
            raise KubeConfigError(f"kubeconfig {exc}") from exc
        data = documents[0].data if documents else None
        if not isinstance(data, dict):
            raise KubeConfigError(f"kubeconfig {path}: not a kubeconfig (expected a map with clusters, contexts, users)")
        contents.append(data)
    return contents


def chosen_context(source: ApiSource) -> str | None:
    """The context kubectl would use: --context if the merged files have it, else the first current-context set."""
    contents = _kubeconfig_documents(source)
    names = [str(c.get("name")) for data in contents for c in data.get("contexts") or [] if isinstance(c, dict)]
    if source.context is not None:
        if source.context not in names:
            hint = suggest.did_you_mean(source.context, names)
            raise KubeConfigError(
                f"--context {source.context}: no such context in {replace(source, context=None).describe()}; "
                f"{hint or 'known: ' + (', '.join(names) or 'none')}"
            )
        return source.context
    current = next((str(data["current-context"]) for data in contents if data.get("current-context")), None)
    if current is None:
        raise KubeConfigError(f"{source.describe()} sets no current-context; pass --context NAME (known: {', '.join(names) or 'none'})")
    return current


def load_configuration(
    base_url: str | None = None, kubeconfig: str | None = None, context: str | None = None, source: ApiSource | None = None
) -> Configuration:
    """The client configuration of `source` (found from the other arguments as kubectl would when not given)."""
    source = source or api_source(base_url, kubeconfig, context)
    if source.kind == "url":
        return configuration_for_url(source.location)
    configuration = Configuration()
    if source.kind == "in-cluster":
        from kubernetes.config.incluster_config import load_incluster_config

        load_incluster_config(client_configuration=configuration)
        return configuration
    from kubernetes.config.kube_config import load_kube_config  # requests, oauthlib: only where a kubeconfig is given

    active = chosen_context(source)
    try:
        load_kube_config(config_file=source.location, context=active, client_configuration=configuration, persist_config=False)
    except Exception as exc:  # the loader raises several unrelated types for a bad file
        raise KubeConfigError(f"cannot use {source.describe()} (context {active}): {' '.join(str(exc).split())[:300]}") from exc
    return configuration


def server_label(source: ApiSource, configuration: Configuration) -> str:
    """The server as a message names it: its URL, and the kubeconfig or context it came from."""
    return configuration.host if source.kind == "url" else f"{configuration.host} ({source.describe()})"


def api_client_for(configuration: Configuration) -> client.ApiClient:
    """The tools' typed client (ResourceV1Api, CoreV1Api on it): `configuration`'s server and auth, our User-Agent.

    A server whose certificate is not verified (insecure-skip-tls-verify) is said once, in one line, instead of
    urllib3's two-line InsecureRequestWarning (with a source path) on every request."""
    _say_if_unverified(configuration)
    api_client = client.ApiClient(configuration)
    api_client.user_agent = USER_AGENT
    return api_client


log = logging.getLogger(__name__)
_TLS_UNVERIFIED: set[str] = set()  # servers already said to be unverified: once per process


def _say_if_unverified(configuration: Configuration) -> None:
    if not configuration.verify_ssl and configuration.host.startswith("https:"):
        _say_tls_unverified(configuration.host)


def _say_tls_unverified(host: str) -> None:
    import warnings

    import urllib3

    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    if host not in _TLS_UNVERIFIED:
        _TLS_UNVERIFIED.add(host)
        log.warning("the API server's TLS certificate is not verified (insecure-skip-tls-verify in the kubeconfig)", extra=fields(server=host))


def make_api_client(base_url: str | None = None, kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An ApiClient ready for ResourceV1Api / CoreV1Api."""
    return api_client_for(load_configuration(base_url, kubeconfig, context))


def cached_list_query(since: str | None, paginated: bool = False) -> dict[str, str]:
    """The resourceVersion parameters of a LIST the API server answers from its watch cache.

    A LIST without resourceVersion is a consistent read: served from the cache only once the cache has caught up with
    etcd (within 3 s), else from etcd, which cannot filter by field, so one such read of a node's slices reads every
    slice of the cluster. `since` (the newest resourceVersion this client has seen: its own writes, the events it
    reacts to) makes the answer include all of it: NotOlderThan, paginated, 504 "Too large resource version" when the
    cache does not get there (too_large_version). With nothing seen yet: resourceVersion=0, any state of the cache, as
    client-go's first LIST; it ignores `limit` (v1.35.6 answers every object at once), so a paginated reader asks
    NotOlderThan "1" instead, the same "any state" (resourceVersions are etcd revisions, the first is 1) in pages.
    """
    if since:
        return {"resourceVersion": since, "resourceVersionMatch": "NotOlderThan"}
    if paginated:
        return {"resourceVersion": "1", "resourceVersionMatch": "NotOlderThan"}
    return {"resourceVersion": "0"}


def too_large_version(exc: BaseException) -> bool:
    """The watch cache did not reach the version a NotOlderThan read asked for (504 Timeout, ResourceVersionTooLarge)."""
    return isinstance(exc, ApiException) and exc.status == 504 and "ResourceVersionTooLarge" in str(exc.body or "")


def newer_version(current: str | None, seen: str | None) -> str | None:
    """The newer of two resourceVersions (etcd revisions: numbers; a non-number seen last counts as newer)."""
    if not seen:
        return current
    if current and current.isdigit() and seen.isdigit() and int(current) >= int(seen):
        return current
    return seen


class JsonApi:
    """The driver's connection to one API server: plain-JSON requests and raw watches on the kubernetes client's REST
    layer (`kubernetes.client.rest.RESTClientObject`: TLS, client certificates, proxy, the urllib3 pool and its
    retries), with `configuration`'s host and auth and our User-Agent. Every module of the daemon takes one.

    Not through `ApiClient`: its module imports multiprocessing.pool and dateutil for the typed models, which the
    daemon does not use (docs/performance.md, "Memory over cycles"), and its generated methods turn a dict body into
    models and back (tens of milliseconds for a 64-device ResourceSlice, and fields newer than the client dropped).
    The auth header is asked of the configuration on every request, so a token the configuration's
    `refresh_api_key_hook` rotates (the in-cluster loader re-reads the service-account token) is sent from then on.
    The tools that use the typed ResourceV1Api/CoreV1Api share their ApiClient's pool through `JsonApi.of`.
    """

    def __init__(self, configuration: Configuration, rest: Any = None) -> None:
        from kubernetes.client.rest import RESTClientObject

        _say_if_unverified(configuration)
        self.configuration = configuration
        self.rest: RESTClientObject = rest if rest is not None else RESTClientObject(configuration)

    @classmethod
    def of(cls, api_client: client.ApiClient) -> JsonApi:
        """Plain JSON through a tool's ApiClient: its configuration and its pool."""
        return cls(api_client.configuration, api_client.rest_client)

    @property
    def host(self) -> str:
        return str(self.configuration.host)

    def headers(self, body: bool = False) -> dict[str, str]:
        """A request's headers: JSON, our User-Agent and the configuration's auth as of now (its refresh hook run)."""
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if body:
            headers["Content-Type"] = "application/json"
        # Every header setting, as ApiClient.update_params_for_auth applies them (the typed dict names only BearerToken).
        settings = cast("Mapping[str, Mapping[str, Any]]", self.configuration.auth_settings())
        for setting in settings.values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[str(setting["key"])] = str(setting["value"])
        return headers

    def url(self, path: str, query: Mapping[str, str] | None = None) -> str:
        """`path` (already quoted) under the host, with `query`'s values quoted."""
        if not query:
            return self.host + path
        return f"{self.host}{path}?{urlencode(list(query.items()), quote_via=quote)}"

    def send(self, method: str, path: str, query: Mapping[str, str] | None = None, body: Any = None, timeout: Timeout = None) -> Any:
        """One request; the client's RESTResponse, whatever its status (not read yet)."""
        headers = self.headers(body is not None)
        return self.rest.request(method, self.url(path, query), headers=headers, body=body, _request_timeout=timeout)

    @staticmethod
    def _raise_for_status(response: Any) -> None:
        if not 200 <= response.status <= 299:
            response.read()
            text = response.data.decode("utf-8", "replace") if response.data else None
            raise ApiException.from_response(http_resp=response, body=text, data=None)

    def request(self, method: str, path: str, query: Mapping[str, str] | None = None, body: Any = None, timeout: Timeout = None) -> dict[str, Any]:
        """One request (`timeout` in seconds, or (connect, read); None: the client's default); the decoded JSON answer,
        or ApiException carrying the server's Status."""
        response = self.send(method, path, query, body, timeout)
        self._raise_for_status(response)
        response.read()
        decoded: dict[str, Any] = json.loads(response.data) if response.data else {}
        return decoded

    def watch(self, path: str, query: Mapping[str, str]) -> WatchStream:
        """Open a watch (`?watch=true` is added); iterate the returned stream for raw events."""
        response = self.send("GET", path, {**query, "watch": "true"})
        self._raise_for_status(response)
        return WatchStream(response.response)

    def close(self) -> None:
        """Close the pool's connections (a JsonApi sharing a tool's ApiClient closes that client's)."""
        self.rest.close()

    def __enter__(self) -> JsonApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_json_api(base_url: str | None = None, kubeconfig: str | None = None, context: str | None = None) -> JsonApi:
    """A JsonApi found from a URL, kubeconfig or the in-cluster account, as `load_configuration` finds it."""
    return JsonApi(load_configuration(base_url, kubeconfig, context))


class WatchStream:
    """Raw watch events ({"type", "object"}) as dicts; ERROR events raise ApiException (410 = expired), a line beyond
    watch_lines.MAX_LINE_BYTES raises WatchLineTooLong."""

    def __init__(self, response: Any) -> None:
        self._response = response

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            for line in watch_lines(self._response.stream(amt=READ_BYTES, decode_content=False)):
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
