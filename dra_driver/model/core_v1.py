"""The few core/v1 (and meta/v1) fields the driver reads: an object's metadata, a Pod's resource claims.

Both are `Tolerant` (api_base.py): metadata is checked by the input layer's envelope (ingest/envelope.py)
and carries many server-set fields; of a Pod the tools read only `spec.resourceClaims`.
"""

from __future__ import annotations

from pydantic import Field

from dra_driver.model.api_base import Tolerant


class ObjectMeta(Tolerant):
    name: str = ""
    generate_name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""


class PodResourceClaim(Tolerant):
    name: str = ""
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class PodSpec(Tolerant):
    resource_claims: list[PodResourceClaim] = Field(default_factory=list)


class Pod(Tolerant):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)
