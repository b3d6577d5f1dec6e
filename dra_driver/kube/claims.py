"""Read ResourceClaims (resource.k8s.io/v1) for the kubelet plugin.

The plugin needs only a few fields of a claim: identity and
`status.allocation.devices` (results and config). The claim is parsed into
model/resource_v1.py's ResourceClaim, read as an API server's object: unknown
fields are ignored on purpose (model/api_base.py), since API objects grow with
every release and the plugin must keep working with newer servers. (Opaque
*driver* configuration is the opposite case and is validated strictly by the
backend.)

The GET goes through the driver's JsonApi (kube/client.py: the kubernetes
client's REST layer, its host, auth, TLS and urllib3 pool) but not through the
generated ResourceV1Api method: that one validates its arguments with pydantic
and would build typed models. The raw JSON is parsed straight into the models
below; this is the hot path of every NodePrepareResources call.

Deadlines: a GET made for a kubelet call must end before that call's deadline
(the kubelet gives up after 45 s and ignores a late answer). So the request's
timeout is the time left, and urllib3's own retries are off: they would repeat
a slow GET with a fresh timeout each time (a 10 s server took 40 s). Only a
request that reached no server (connection refused or dropped before an
answer) is tried again, while time is left.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING
from urllib.parse import quote

import urllib3
from pydantic import ValidationError as PydanticValidationError

from dra_driver.common.errors import DraError
from dra_driver.model.resource_v1 import ResourceClaim

if TYPE_CHECKING:  # imported when a reader is built: the plugin serves its sockets before loading the client
    from dra_driver.kube.client import JsonApi


class ClaimLookupError(DraError):
    """The claim could not be read; the message says why in terms of the claim."""


class ClaimReader:
    """GET a ResourceClaim by namespace/name, within the caller's deadline."""

    _PATH = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
    _ATTEMPTS = 3  # for requests that reached no server; a slow answer is never repeated

    def __init__(self, api: JsonApi, timeout_s: float = 10.0) -> None:
        self._api = api
        self._timeout_s = timeout_s  # per request when the caller has no deadline
        self._hosts: dict[str, urllib3.HTTPConnectionPool] = {}  # scheme://host:port -> the manager's pool for it

    def _request(self, url: str, headers: dict[str, str], timeout: urllib3.Timeout) -> urllib3.BaseHTTPResponse:
        """One GET on the client's pool for the API server's host; the body is read and the connection released.

        The PoolManager is asked for that pool once per host, not per request (its URL parsing and pool-key
        building cost as much as the rest of the client side of the GET); TLS and auth settings are the pool's
        and the caller's headers, exactly as before. Through a proxy every request goes by the manager, which
        rewrites it for the proxy.
        """
        manager = self._api.rest.pool_manager
        if isinstance(manager, urllib3.ProxyManager):
            return manager.request("GET", url, headers=headers, timeout=timeout, retries=False)
        scheme, sep, rest = url.partition("://")
        netloc, _, path = rest.partition("/")  # the host's path prefix (if any) stays in the request path
        origin = f"{scheme}{sep}{netloc}"
        pool = self._hosts.get(origin)
        if pool is None:
            pool = self._hosts[origin] = manager.connection_from_url(origin)
        return pool.urlopen("GET", f"/{path}", headers=headers, timeout=timeout, retries=False)

    def get(self, namespace: str, name: str, uid: str = "", deadline: float | None = None) -> ResourceClaim:
        """The claim as stored now. `uid` (what the kubelet asked for) is not needed for a GET: the caller
        compares. `deadline` (time.monotonic()) bounds the whole lookup, retries included."""
        where = f"ResourceClaim {namespace}/{name}"
        url = self._api.url(self._PATH.format(namespace=quote(namespace, safe=""), name=quote(name, safe="")))
        try:
            headers = self._api.headers()  # the auth as of now: a rotated token is sent from its first request
        except Exception as exc:  # e.g. an auth hook that fails: the claim fails, not the daemon
            raise ClaimLookupError(f"reading {where} failed: {exc}") from exc
        status, data = self._fetch(url, headers, where, deadline)
        if status >= 400:
            raise ClaimLookupError(
                f"{where} not found (deleted or never created)" if status == 404 else f"reading {where} failed: HTTP {status}"
            )
        try:
            return ResourceClaim.model_validate_json(data)
        except PydanticValidationError as exc:
            raise ClaimLookupError(f"{where}: unexpected object from the API server: {exc.errors()[0]['msg']}") from exc

    def _fetch(self, url: str, headers: dict[str, str], where: str, deadline: float | None) -> tuple[int, bytes]:
        attempt = 1
        while True:
            timeout = self._timeout_s if deadline is None else deadline - time.monotonic()
            if timeout <= 0:
                raise ClaimLookupError(f"reading {where} did not start before the kubelet's deadline; the kubelet will retry")
            try:
                response = self._request(url, headers, urllib3.Timeout(total=timeout))
                return response.status, response.data
            except (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ProtocolError) as exc:
                if attempt == self._ATTEMPTS:
                    raise ClaimLookupError(f"reading {where} failed: {exc}") from exc
            except urllib3.exceptions.TimeoutError as exc:
                cause = f"the API server did not answer within {timeout:.1f} s"
                if deadline is not None:
                    raise ClaimLookupError(f"reading {where} did not finish before the kubelet's deadline: {cause}; the kubelet will retry") from exc
                raise ClaimLookupError(f"reading {where} timed out: {cause}") from exc
            except Exception as exc:  # TLS and other transport errors: the claim fails, not the daemon
                raise ClaimLookupError(f"reading {where} failed: {exc}") from exc
            time.sleep(0.05 * attempt)  # no server was reached: a short pause, then again while time is left
            attempt += 1
