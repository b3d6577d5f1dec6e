"""The resource.k8s.io/v1 types (k8s.io/api resource/v1/types.go), declared once for every reader.

The node's claim reader and claim cache, the tools' claim, template and class readers (sources/claims.py),
cel/classes.py and explain all use these. Only the fields something reads are declared; how strictly an
object is checked depends on who wrote it (api_base.py): read from the API server, unknown fields are
ignored; written by a user (`validate_authored`), they are errors with their path, except in metadata and
status (`Tolerant`). The API's numeric limits are here too; the rules that use them are
sources/claims.py's `claim_spec_errors` and `class_spec_errors`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from dra_driver.model.api_base import ApiModel, Tolerant
from dra_driver.model.api_group import API_VERSION
from dra_driver.model.core_v1 import ObjectMeta
from dra_driver.model.names import MAX_DNS_SUBDOMAIN

# The API's limits (pkg/apis/resource/types.go).
MAX_REQUESTS = 32
MAX_SUBREQUESTS = 8
MAX_SELECTORS = 32  # DeviceSelectorsMaxSize
MAX_CONSTRAINTS = 32
MAX_CONFIGS = 32  # DeviceConfigMaxSize
MAX_CONSTRAINT_REQUESTS = 32
MAX_TOLERATIONS = 16
MAX_EXPRESSION_BYTES = 10240  # CELSelectorExpressionMaxLength
MAX_OPAQUE_BYTES = 10240
MAX_RESERVED_FOR = 256


# -- shared by claims and classes ------------------------------------------------------------------


class CELDeviceSelector(ApiModel):
    expression: str


class DeviceSelector(ApiModel):
    cel: CELDeviceSelector | None = None


class OpaqueDeviceConfiguration(ApiModel):
    driver: str = ""
    parameters: Any = None  # the vendor's own API object, checked by its backend (or explain's config check)


# -- ResourceClaim spec ---------------------------------------------------------------------------


class DeviceToleration(ApiModel):
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class CapacityRequirements(ApiModel):
    requests: dict[str, str | int] = Field(default_factory=dict)


class DeviceSelection(ApiModel):
    """The fields ExactDeviceRequest and DeviceSubRequest share: which devices, how many."""

    device_class_name: str = ""
    selectors: list[DeviceSelector] = Field(default_factory=list)
    allocation_mode: str | None = None
    count: int | None = None
    tolerations: list[DeviceToleration] = Field(default_factory=list)
    capacity: CapacityRequirements | None = None


class ExactDeviceRequest(DeviceSelection):
    admin_access: bool | None = None


class DeviceSubRequest(DeviceSelection):
    name: str = ""


class DeviceRequest(ApiModel):
    name: str = ""
    exactly: ExactDeviceRequest | None = None
    first_available: list[DeviceSubRequest] | None = None


class DeviceConstraint(ApiModel):
    requests: list[str] = Field(default_factory=list)
    match_attribute: str | None = None
    distinct_attribute: str | None = None


class DeviceClaimConfiguration(ApiModel):
    requests: list[str] = Field(default_factory=list)
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClaim(ApiModel):
    requests: list[DeviceRequest] = Field(default_factory=list)
    constraints: list[DeviceConstraint] = Field(default_factory=list)
    config: list[DeviceClaimConfiguration] = Field(default_factory=list)


class ResourceClaimSpec(ApiModel):
    devices: DeviceClaim = Field(default_factory=DeviceClaim)


# -- ResourceClaim status (written by the API server and the scheduler) ------------------------------


class DeviceRequestAllocationResult(ApiModel):
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool | None = None
    share_id: str | None = Field(None, alias="shareID")
    # Consumable capacity: what this result takes of the shared device (qualified name -> quantity).
    consumed_capacity: dict[str, str] | None = None


class DeviceAllocationConfiguration(ApiModel):
    source: str = ""
    requests: list[str] = Field(default_factory=list)
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceAllocationResult(ApiModel):
    results: list[DeviceRequestAllocationResult] = Field(default_factory=list)
    config: list[DeviceAllocationConfiguration] = Field(default_factory=list)


class AllocationResult(ApiModel):
    devices: DeviceAllocationResult | None = None
    node_selector: Any = None  # kept raw: explain passes it on


class ResourceClaimStatus(Tolerant):
    allocation: AllocationResult | None = None
    # Read only for metrics (which pods hold the devices), so kept raw: an odd entry must never fail a prepare.
    reserved_for: Any = None


# -- the objects ------------------------------------------------------------------------------------


class _ResourceObject(ApiModel):
    """The envelope every resource.k8s.io/v1 object shares; subclasses add kind and spec."""

    api_version: str = API_VERSION
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)


class ResourceClaim(_ResourceObject):
    kind: str = "ResourceClaim"
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)
    status: ResourceClaimStatus = Field(default_factory=ResourceClaimStatus)

    @property
    def allocation(self) -> AllocationResult | None:
        return self.status.allocation

    @property
    def reserved_pods(self) -> list[str]:
        """Names of the pods status.reservedFor lists (core-group `pods` entries with a plausible name only)."""
        entries = self.status.reserved_for if isinstance(self.status.reserved_for, list) else []
        return [
            str(ref["name"])
            for ref in entries[:MAX_RESERVED_FOR]
            if isinstance(ref, dict) and ref.get("resource") == "pods" and not ref.get("apiGroup")
            and isinstance(ref.get("name"), str) and 0 < len(ref["name"]) <= MAX_DNS_SUBDOMAIN
        ]


class TemplateMeta(ApiModel):
    """A template's metadata: only labels and annotations are copied into generated claims (3.5)."""

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class ResourceClaimTemplateSpec(ApiModel):
    metadata: TemplateMeta | None = None
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)


class ResourceClaimTemplate(_ResourceObject):
    kind: str = "ResourceClaimTemplate"
    spec: ResourceClaimTemplateSpec = Field(default_factory=ResourceClaimTemplateSpec)


class DeviceClassConfiguration(ApiModel):
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceClassSpec(ApiModel):
    selectors: list[DeviceSelector] = Field(default_factory=list)
    config: list[DeviceClassConfiguration] = Field(default_factory=list)
    extended_resource_name: str | None = None


class DeviceClass(_ResourceObject):
    kind: str = "DeviceClass"
    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def expressions(self) -> list[str]:
        return [s.cel.expression for s in self.spec.selectors if s.cel is not None]
