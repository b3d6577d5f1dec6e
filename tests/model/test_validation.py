from __future__ import annotations

import copy
from typing import Any

import pytest

from dra_driver.common.errors import ValidationError
from dra_driver.model import Inventory, render_pool, validate_slices
from dra_driver.model.validation import is_semver, qualified_name_problem, slice_errors
from tests.model.conftest import make_device


def one_slice(**device_overrides: Any) -> dict[str, Any]:
    obj = render_pool(Inventory("gpu.example.com", [make_device("gpu-0")]), node_name="node-a")[0]
    obj["spec"]["devices"][0].update(device_overrides)
    return obj


def messages(obj: dict[str, Any]) -> list[str]:
    return [str(e) for e in slice_errors(obj, "S")]


def test_valid_slice_has_no_errors() -> None:
    assert messages(one_slice()) == []


@pytest.mark.parametrize("name", ["GPU-0", "gpu_0", "-gpu", "gpu-", "a" * 64, ""])
def test_device_name_must_be_dns_label(name: str) -> None:
    errors = messages(one_slice(name=name))
    assert any(".name" in e and "DNS label" in e for e in errors), errors


def test_error_names_device_and_field() -> None:
    errors = messages(one_slice(attributes={"model": {"string": "x" * 65}}))
    assert errors == ["S.spec.devices[0](gpu-0).attributes[model].string: is 65 bytes long; at most 64 bytes are allowed"]


def test_string_limit_counts_bytes_not_characters() -> None:
    assert messages(one_slice(attributes={"model": {"string": "é" * 32}})) == []
    assert messages(one_slice(attributes={"model": {"string": "é" * 33}}))


@pytest.mark.parametrize("version", ["1.2", "01.2.3", "1.2.3-", "v1.2.3", "580.159.04"])
def test_versions_must_be_semver(version: str) -> None:
    errors = messages(one_slice(attributes={"driverVersion": {"version": version}}))
    assert any("semantic version" in e for e in errors), errors


@pytest.mark.parametrize("version", ["1.2.3", "580.159.4", "1.0.0-rc.1+build.5", "0.0.0"])
def test_valid_semver(version: str) -> None:
    assert is_semver(version)


def test_attribute_needs_exactly_one_member() -> None:
    assert any("exactly one" in e for e in messages(one_slice(attributes={"a": {"int": 1, "bool": True}})))
    assert any("exactly one" in e for e in messages(one_slice(attributes={"a": {}})))
    assert any("not an integer" in e for e in messages(one_slice(attributes={"a": {"int": True}})))


@pytest.mark.parametrize(
    "key, fragment",
    [
        ("a/b/c", "at most one '/'"),
        ("/memory", "empty domain"),
        ("example.com/", "empty identifier"),
        ("Example_Com/memory", "DNS subdomain"),
        ("x" * 33, "at most 32"),
        ("9lives", "C identifier"),
        ("example.com/" + "m" * 33, "at most 32"),
    ],
)
def test_qualified_names(key: str, fragment: str) -> None:
    problem = qualified_name_problem(key)
    assert problem and fragment in problem
    assert any(fragment in e for e in messages(one_slice(attributes={key: {"int": 1}})))


def test_32_attributes_and_capacities_together() -> None:
    attributes = {f"a{i}": {"int": i} for i in range(31)}
    assert messages(one_slice(attributes=attributes, capacity={"memory": {"value": "1Gi"}})) == []
    attributes["a31"] = {"int": 31}
    assert any("at most 32" in e for e in messages(one_slice(attributes=attributes, capacity={"memory": {"value": "1Gi"}})))


def test_capacity_must_be_quantity() -> None:
    assert any("not a quantity" in e for e in messages(one_slice(capacity={"memory": {"value": "lots"}})))


def test_empty_valid_values_is_an_error_not_a_crash() -> None:
    policy = {"default": "1Gi", "validValues": []}
    errors = messages(one_slice(allowMultipleAllocations=True, capacity={"memory": {"value": "8Gi", "requestPolicy": policy}}))
    assert any("requestPolicy.validValues" in e and "one of them the default" in e for e in errors), errors


def test_devices_and_counters_not_both() -> None:
    obj = one_slice()
    obj["spec"]["sharedCounters"] = [{"name": "cs", "counters": {"c": {"value": "1"}}}]
    assert any("not both" in e for e in messages(obj))


def test_device_limits_128_and_64() -> None:
    plain = render_pool(Inventory("gpu.example.com", [make_device(f"d-{i}") for i in range(1)]), "n")[0]
    plain["spec"]["devices"] = [dict(plain["spec"]["devices"][0], name=f"d-{i}") for i in range(129)]
    assert any("at most 128" in e for e in messages(plain))
    plain["spec"]["devices"] = plain["spec"]["devices"][:65]
    plain["spec"]["devices"][0]["taints"] = [{"key": "example.com/bad", "effect": "NoSchedule"}]
    assert any("at most 64" in e and "taints or consumes counters" in e for e in messages(plain))


def test_at_most_8_counter_sets_per_slice() -> None:
    obj = one_slice()
    del obj["spec"]["devices"]
    obj["spec"]["sharedCounters"] = [{"name": f"cs-{i}", "counters": {"c": {"value": "1"}}} for i in range(9)]
    assert any("at most 8" in e for e in messages(obj))


def test_taint_fields() -> None:
    errors = messages(one_slice(taints=[{"key": "bad key", "effect": "Sometimes", "value": "x" * 64}]))
    assert any(".key" in e for e in errors)
    assert any(".effect" in e and "NoSchedule" in e for e in errors)
    assert any(".value" in e for e in errors)


def test_exactly_one_node_selection() -> None:
    obj = one_slice()
    obj["spec"]["allNodes"] = True
    assert any("exactly one of nodeName" in e for e in messages(obj))


def test_driver_and_pool_names() -> None:
    obj = one_slice()
    obj["spec"]["driver"] = "GPU_driver"
    obj["spec"]["pool"]["name"] = "Bad Pool"
    obj["spec"]["pool"]["resourceSliceCount"] = 0
    errors = messages(obj)
    assert any("spec.driver" in e for e in errors)
    assert any("spec.pool.name" in e for e in errors)
    assert any("resourceSliceCount" in e for e in errors)


def test_names_unique_within_slice_and_pool() -> None:
    slices = render_pool(Inventory("gpu.example.com", [make_device(f"d-{i}") for i in range(130)]), "n")
    slices[1]["spec"]["devices"][0]["name"] = "d-0"
    with pytest.raises(ValidationError) as info:
        validate_slices(slices)
    assert "device name 'd-0' is also used" in str(info.value)
    twice = copy.deepcopy(slices[0])
    twice["spec"]["devices"].append(copy.deepcopy(twice["spec"]["devices"][0]))
    assert any("used twice" in e for e in messages(twice))


def test_counter_consumption_must_reference_pool_counters(partitioned_inventory: Inventory) -> None:
    slices = render_pool(partitioned_inventory, "n")
    device_slice = next(s for s in slices if "devices" in s["spec"])
    device_slice["spec"]["devices"][0]["consumesCounters"][0]["counterSet"] = "nope"
    device_slice["spec"]["devices"][1]["consumesCounters"][0]["counters"] = {"ghost": {"value": "1"}}
    with pytest.raises(ValidationError) as info:
        validate_slices(slices)
    text = str(info.value)
    assert "counter set 'nope' is not defined" in text
    assert "counters ['ghost'] do not exist" in text


def test_validation_error_lists_every_problem() -> None:
    obj = one_slice(name="BAD", capacity={"memory": {"value": "x"}})
    with pytest.raises(ValidationError) as info:
        validate_slices([obj])
    assert len(info.value.errors) == 2


def test_cached_quantity_check_does_not_confuse_true_with_1() -> None:
    assert messages(one_slice(capacity={"cores": {"value": 1}})) == []
    assert any("not a quantity" in e for e in messages(one_slice(capacity={"cores": {"value": True}})))


def test_cached_attribute_check_keeps_types_apart() -> None:
    assert messages(one_slice(attributes={"n": {"int": 1}})) == []
    assert any("not an integer" in e for e in messages(one_slice(attributes={"n": {"int": True}})))
    assert messages(one_slice(attributes={"b": {"bool": True}})) == []
    assert any("not a boolean" in e for e in messages(one_slice(attributes={"b": {"bool": 1}})))
    assert any("not a string" in e for e in messages(one_slice(attributes={"s": {"string": ["x"]}})))


@pytest.mark.parametrize(
    "field, value, path",
    [
        ("attributes", [{"int": 1}], "spec.devices[0](gpu-0).attributes"),
        ("capacity", ["80Gi"], "spec.devices[0](gpu-0).capacity"),
        ("consumesCounters", {"counterSet": "x"}, "spec.devices[0](gpu-0).consumesCounters"),
        ("taints", {"key": "a"}, "spec.devices[0](gpu-0).taints"),
    ],
)
def test_malformed_device_structure_is_an_error_not_a_crash(field: str, value: Any, path: str) -> None:
    errors = messages(one_slice(**{field: value}))
    assert any(e.startswith(f"S.{path}: must be") for e in errors), errors


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda s: s["spec"].__setitem__("devices", {"gpu-0": {}}), "spec.devices: must be a list"),
        (lambda s: s["spec"].__setitem__("sharedCounters", "cs"), "spec.sharedCounters: must be a list"),
        (lambda s: s["spec"]["pool"].__setitem__("generation", "two"), "generation"),
        (lambda s: s.__setitem__("metadata", ["x"]), "ResourceSlice"),
        (lambda s: s["spec"]["devices"].__setitem__(0, "gpu-0"), "must be an object"),
    ],
)
def test_malformed_slices_give_field_errors(mutate: Any, fragment: str) -> None:
    obj = one_slice()
    mutate(obj)
    with pytest.raises(ValidationError) as info:
        validate_slices([obj, one_slice()])
    assert fragment in str(info.value)


def test_int_attributes_must_fit_int64() -> None:
    assert messages(one_slice(attributes={"n": {"int": 2**63 - 1}})) == []
    assert any("64-bit" in e for e in messages(one_slice(attributes={"n": {"int": 2**63}})))


def test_node_name_format() -> None:
    obj = one_slice()
    obj["spec"]["nodeName"] = "Node_A"
    assert any("spec.nodeName" in e for e in messages(obj))


def test_pool_name_length_limit() -> None:
    obj = one_slice()
    obj["spec"]["pool"]["name"] = "a" * 254
    assert any("at most 253" in e for e in messages(obj))


def test_consumption_limits() -> None:
    three = [{"counterSet": f"cs-{i}", "counters": {"c": {"value": "1"}}} for i in range(3)]
    assert any("at most 2" in e for e in messages(one_slice(consumesCounters=three)))
    twice = [{"counterSet": "cs", "counters": {"c": {"value": "1"}}}] * 2
    assert any("appears twice" in e for e in messages(one_slice(consumesCounters=twice)))


def test_counter_set_limits() -> None:
    obj = one_slice()
    del obj["spec"]["devices"]
    obj["spec"]["sharedCounters"] = [
        {"name": "cs", "counters": {f"c-{i}": {"value": "1"} for i in range(33)}},
        {"name": "cs-2", "counters": {"Bad_Name": {"value": "1"}}},
    ]
    errors = messages(obj)
    assert any("at most 32" in e for e in errors)
    assert any("Bad_Name" in e and "DNS label" in e for e in errors)


def test_at_most_16_taints() -> None:
    taints = [{"key": f"example.com/t{i}", "effect": "NoSchedule"} for i in range(17)]
    assert any("at most 16" in e for e in messages(one_slice(taints=taints)))


def test_counter_set_defined_twice_in_pool() -> None:
    counters = {"name": "cs", "counters": {"c": {"value": "1"}}}
    first, second = one_slice(), one_slice()
    for obj in (first, second):
        del obj["spec"]["devices"]
        obj["spec"]["sharedCounters"] = [dict(counters)]
        obj["spec"]["pool"]["resourceSliceCount"] = 2
    with pytest.raises(ValidationError, match="counter set 'cs' is defined twice"):
        validate_slices([first, second])


@pytest.mark.parametrize(
    "mutate",
    [
        lambda o: o["spec"]["devices"][0]["attributes"].update({"model\n": {"int": 1}}),
        lambda o: o["spec"]["devices"][0]["attributes"].update({"driverVersion": {"version": "1.2.3\n"}}),
        lambda o: o["spec"]["devices"][0].update({"name": "gpu-0\n"}),
        lambda o: o["spec"]["pool"].update({"name": "node-a\n"}),
        lambda o: o["spec"]["devices"][0].update({"taints": [{"key": "example.com/unhealthy\n", "effect": "NoSchedule"}]}),
        lambda o: o["spec"]["devices"][0].update({"taints": [{"key": "example.com/unhealthy", "value": "yes\n", "effect": "NoSchedule"}]}),
    ],
)
def test_a_trailing_newline_is_not_a_valid_name(mutate: Any) -> None:
    obj = one_slice()
    mutate(obj)
    assert messages(obj)
