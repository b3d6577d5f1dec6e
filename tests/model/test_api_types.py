"""The Kubernetes API types, declared once (model/resource_v1.py, resource_v1alpha3.py, core_v1.py), and how
strictly each read checks them (model/api_base.py): an API server's object tolerates fields a newer server
adds; a user's object names every unknown field with its path and the fix."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError as PydanticValidationError

from dra_driver.model.api_base import field_errors, validate_authored
from dra_driver.model.core_v1 import Pod
from dra_driver.model.resource_v1 import DeviceClass, ResourceClaim, ResourceClaimTemplate
from dra_driver.model.resource_v1alpha3 import DeviceTaintRule
from dra_driver.sources.claims import parse_object

PACKAGE = Path(__file__).resolve().parents[2] / "dra_driver"
MODEL_FILES = {"model/api_base.py", "model/core_v1.py", "model/resource_v1.py", "model/resource_v1alpha3.py"}
# Every API type and the names the copies this replaced used for them: none may be declared outside the model.
API_TYPES = {
    "ObjectMeta", "Metadata", "TemplateMeta", "Pod", "PodSpec", "PodResourceClaim",
    "ResourceClaim", "ResourceClaimSpec", "ResourceClaimStatus", "ClaimStatus", "ResourceClaimTemplate", "ResourceClaimTemplateSpec",
    "DeviceClaim", "DeviceRequest", "ExactDeviceRequest", "DeviceSubRequest", "DeviceSelection", "DeviceConstraint",
    "DeviceToleration", "CapacityRequirements", "DeviceSelector", "CELDeviceSelector", "CelSelector",
    "DeviceClaimConfiguration", "OpaqueDeviceConfiguration", "OpaqueConfiguration", "OpaqueConfig",
    "AllocationResult", "Allocation", "DeviceAllocationResult", "DeviceAllocation", "DeviceRequestAllocationResult",
    "DeviceAllocationConfiguration", "AllocationConfig",
    "DeviceClass", "DeviceClassSpec", "DeviceClassConfiguration", "ClassConfig",
    "DeviceTaintRule", "DeviceTaintRuleSpec", "DeviceTaintSelector",
}  # fmt: skip
# Not API types: the allocator's plain input that sources/claims.to_class builds from a DeviceClass.
PLAIN_TYPES = {("DeviceClassSpec", "allocator/types.py")}


def _class_definitions() -> dict[str, list[str]]:
    """Class name -> the files under dra_driver/ that define a class of that name."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(path.relative_to(PACKAGE).as_posix())
    return found


def test_each_api_type_is_declared_once_in_the_model() -> None:
    definitions = {name: [f for f in files if (name, f) not in PLAIN_TYPES] for name, files in _class_definitions().items()}
    misplaced = {
        name: files for name, files in definitions.items() if name in API_TYPES and (len(files) != 1 or files[0] not in MODEL_FILES)
    }
    assert misplaced == {}
    assert {"ResourceClaim", "DeviceClass", "DeviceTaintRule", "ObjectMeta"} <= set(definitions)  # the scan sees them


def test_no_pydantic_base_outside_the_model_decides_strictness() -> None:
    """The private strict/loose bases the copies had: strictness is model/api_base.py's alone."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "model":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            is_config = isinstance(node, ast.Call) and getattr(node.func, "id", "") == "ConfigDict"
            if is_config and any(k.arg == "extra" for k in node.keywords):
                offenders.append(path.relative_to(PACKAGE).as_posix())
    assert offenders == []


def test_the_resource_api_version_is_spelled_only_in_api_group() -> None:
    """model/api_group.py names resource.k8s.io and its versions; render.py and resource_v1.py each had a copy of the v1
    string, and other modules wrote it out again."""
    version = re.compile(r"resource\.k8s\.io/v[0-9a-z]+\Z")
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and version.match(node.value):
                offenders.append(f"{path.relative_to(PACKAGE).as_posix()}:{node.lineno}")
    assert offenders == []


FUTURE = {"aFieldFrom137": {"any": ["thing"]}}  # what a newer API server may add anywhere


def _claim_from_a_newer_server() -> dict[str, Any]:
    result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-0", "shareID": "s-1", **FUTURE}
    config = {"source": "FromClaim", "requests": [], "opaque": {"driver": "gpu.nvidia.com", "parameters": {}}, **FUTURE}
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", **FUTURE}, **FUTURE}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ml", "uid": "u-1", "resourceVersion": "7", **FUTURE},
        "spec": {"devices": {"requests": [request], **FUTURE}, **FUTURE},
        "status": {"allocation": {"devices": {"results": [result], "config": [config], **FUTURE}, **FUTURE}, **FUTURE},
        **FUTURE,
    }


def test_an_api_server_object_tolerates_unknown_fields_at_every_level() -> None:
    claim = ResourceClaim.model_validate(_claim_from_a_newer_server())
    assert claim.metadata.uid == "u-1" and claim.metadata.resource_version == "7"
    assert claim.allocation is not None and claim.allocation.devices is not None
    (result,) = claim.allocation.devices.results
    assert (result.pool, result.device, result.share_id) == ("node-a", "gpu-0", "s-1")
    assert claim.allocation.devices.config[0].opaque is not None
    assert claim.spec.devices.requests[0].exactly is not None


def test_the_same_object_written_by_a_user_names_every_unknown_field_outside_metadata_and_status() -> None:
    parsed = parse_object(_claim_from_a_newer_server(), "ResourceClaim c")
    assert isinstance(parsed, list)
    assert {e.path for e in parsed} == {
        "ResourceClaim c.aFieldFrom137",
        "ResourceClaim c.spec.aFieldFrom137",
        "ResourceClaim c.spec.devices.aFieldFrom137",
        "ResourceClaim c.spec.devices.requests[0].aFieldFrom137",
        "ResourceClaim c.spec.devices.requests[0].exactly.aFieldFrom137",
    }
    assert all(e.message.startswith("unknown field; remove it") for e in parsed)
    assert isinstance(parse_object(_claim_from_a_newer_server(), "ResourceClaim c", from_server=True), ResourceClaim)


def test_a_v1beta1_request_field_says_move_it_under_exactly() -> None:
    request = {"name": "gpu", "count": 2, "colour": "red"}
    doc = {"kind": "ResourceClaimTemplate", "metadata": {"name": "t"}, "spec": {"spec": {"devices": {"requests": [request]}}}}
    with pytest.raises(PydanticValidationError) as caught:
        validate_authored(ResourceClaimTemplate, doc)
    by_path = {e.path: e.message for e in field_errors(caught.value, "t")}
    assert by_path["t.spec.spec.devices.requests[0].count"].startswith("unknown field in resource.k8s.io/v1: move it under `exactly:`")
    assert by_path["t.spec.spec.devices.requests[0].colour"].startswith("unknown field; remove it")


@pytest.mark.parametrize(
    ("model", "doc", "path"),
    [
        (DeviceClass, {"metadata": {"name": "c"}, "spec": {"selector": []}}, ("spec", "selector")),
        (
            DeviceClass,
            {"metadata": {"name": "c"}, "spec": {"config": [{"opaque": {"driver": "d", "parameters": {}, "params": 1}}]}},
            ("spec", "config", 0, "opaque", "params"),
        ),
        (
            DeviceTaintRule,
            {"apiVersion": "resource.k8s.io/v1alpha3", "kind": "DeviceTaintRule", "spec": {"taint": {"key": "k", "effect": "None", "efect": "x"}}},
            ("spec", "taint", "efect"),
        ),
    ],
)
def test_user_objects_of_every_kind_refuse_an_unknown_field(model: type[Any], doc: dict[str, Any], path: tuple[str | int, ...]) -> None:
    with pytest.raises(PydanticValidationError) as caught:
        validate_authored(model, doc)
    assert [(tuple(e["loc"]), e["type"]) for e in caught.value.errors()] == [(path, "extra_forbidden")]
    assert model.model_validate(doc) is not None  # the API server's reading ignores it


def test_a_pod_is_read_for_its_claims_only_even_from_a_user() -> None:
    claims = [{"name": "gpu", "resourceClaimName": "c", "x": 1}]
    doc = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], "resourceClaims": claims}}
    pod = validate_authored(Pod, doc)
    assert pod.spec.resource_claims[0].resource_claim_name == "c"


def test_a_tolerant_part_still_refuses_a_wrong_type_with_its_path() -> None:
    with pytest.raises(PydanticValidationError) as caught:
        validate_authored(ResourceClaim, {"metadata": {"name": ["not", "a", "string"]}})
    assert [tuple(e["loc"]) for e in caught.value.errors()] == [("metadata", "name")]


def test_api_objects_are_frozen() -> None:
    claim = ResourceClaim.model_validate(_claim_from_a_newer_server())
    with pytest.raises(PydanticValidationError):
        claim.metadata.name = "other"  # type: ignore[misc]
