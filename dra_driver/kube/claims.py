"""Read ResourceClaims (resource.k8s.io/v1) for the kubelet plugin.

The plugin needs only a few fields of a claim: identity and
`status.allocation.devices` (results and config). They are parsed into small
pydantic models that ignore unknown fields on purpose: API objects grow with
every release and the plugin must keep working with newer servers. (Opaque
*driver* configuration is the opposite case and is validated strictly by the
backend.)

The GET goes through the official kubernetes ApiClient (its host, auth, TLS
and urllib3 pool and retries) but not through the generated ResourceV1Api
method: that one validates its arguments with pydantic and would build typed
models. The raw JSON is parsed straight into the models below; this is the
hot path of every NodePrepareResources call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from dra_driver.errors import DraError

if TYPE_CHECKING:  # imported when a reader is built: the plugin serves its sockets before loading the client
    from kubernetes import client as k8s


class _ApiModel(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class ObjectMeta(_ApiModel):
    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = Field("", alias="resourceVersion")


class OpaqueConfig(_ApiModel):
    driver: str
    parameters: Any = None


class AllocationConfig(_ApiModel):
    source: str = ""
    requests: list[str] = Field(default_factory=list)
    opaque: OpaqueConfig | None = None


class AllocationResult(_ApiModel):
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool | None = Field(None, alias="adminAccess")
    share_id: str | None = Field(None, alias="shareID")


class DeviceAllocation(_ApiModel):
    results: list[AllocationResult] = Field(default_factory=list)
    config: list[AllocationConfig] = Field(default_factory=list)


class Allocation(_ApiModel):
    devices: DeviceAllocation | None = None


class ClaimStatus(_ApiModel):
    allocation: Allocation | None = None


class ResourceClaim(_ApiModel):
    metadata: ObjectMeta
    status: ClaimStatus = Field(default_factory=ClaimStatus)

    @property
    def allocation(self) -> Allocation | None:
        return self.status.allocation


class ClaimLookupError(DraError):
    """The claim could not be read; the message says why in terms of the claim."""


class ClaimReader:
    """GET a ResourceClaim by namespace/name."""

    _PATH = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
    _HEADERS = {"Accept": "application/json"}

    def __init__(self, api_client: k8s.ApiClient, timeout_s: float = 10.0) -> None:
        self._client = api_client
        self._timeout_s = timeout_s

    def get(self, namespace: str, name: str, uid: str = "") -> ResourceClaim:
        """The claim as stored now. `uid` (what the kubelet asked for) is not needed for a GET: the caller compares."""
        from kubernetes.client.exceptions import ApiException  # loaded by the ApiClient already: a dict lookup

        where = f"ResourceClaim {namespace}/{name}"
        try:
            method, url, headers, body, post = self._client.param_serialize(
                method="GET",
                resource_path=self._PATH,
                path_params={"namespace": namespace, "name": name},  # quoted by the client
                header_params=dict(self._HEADERS),
                auth_settings=["BearerToken"],
            )
            response = self._client.call_api(method, url, headers, body, post, _request_timeout=self._timeout_s)
            response.read()
        except ApiException as exc:
            if exc.status == 404:
                raise ClaimLookupError(f"{where} not found (deleted or never created)") from exc
            raise ClaimLookupError(f"reading {where} failed: HTTP {exc.status} {exc.reason}") from exc
        except Exception as exc:  # connection refused, timeout: the claim fails, not the daemon
            raise ClaimLookupError(f"reading {where} failed: {exc}") from exc
        status = response.status
        if status >= 400:
            raise ClaimLookupError(
                f"{where} not found (deleted or never created)" if status == 404 else f"reading {where} failed: HTTP {status}"
            )
        try:
            return ResourceClaim.model_validate_json(response.data)
        except PydanticValidationError as exc:
            raise ClaimLookupError(f"{where}: unexpected object from the API server: {exc.errors()[0]['msg']}") from exc


def allocated_claim_object(
    name: str,
    namespace: str,
    driver: str,
    pool: str,
    devices: dict[str, list[str]],
    device_class: str = "gpu.example.com",
    config: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ResourceClaim wire object already allocated (as the scheduler would leave it): request -> devices.

    For demos, benchmarks and tests that have no scheduler.
    """
    requests = [
        {"name": request, "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": len(names)}}
        for request, names in devices.items()
    ]
    results = [{"request": request, "driver": driver, "pool": pool, "device": device} for request, names in devices.items() for device in names]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": requests}},
        "status": {"allocation": {"devices": {"results": results, "config": list(config or [])}}},
    }
