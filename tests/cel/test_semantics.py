"""Scheduler semantics of the DRA CEL environment: device variable, errors, limits, macros."""

from __future__ import annotations

import pytest

from dra_driver.cel import (
    CelBudgetExceeded,
    CelCompileError,
    CelNotSupported,
    CelRuntimeError,
    ReferencedKey,
    api_server,
    cel_device,
    compile_selector,
)

DEVICE = {
    "name": "gpu-0",
    "attributes": {
        "type": {"string": "gpu"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "driverVersion": {"version": "550.54.15"},
        "index": {"int": 0},
        "mig": {"bool": False},
        "dra-driver.io/family": {"string": "hopper"},
    },
    "capacity": {"memory": {"value": "81559Mi"}, "dra-driver.io/slots": {"value": "4"}},
}


@pytest.fixture(scope="module")
def gpu():
    return cel_device("gpu.nvidia.com", DEVICE)


def run(expression: str, device) -> bool:
    return compile_selector(expression).evaluate(device)


@pytest.mark.parametrize(
    "expression, expected",
    [
        ('device.driver == "gpu.nvidia.com"', True),
        ('device.attributes["gpu.nvidia.com"].type == "gpu"', True),  # bare name -> driver domain
        ('device.attributes["gpu.nvidia.com"]["productName"].startsWith("NVIDIA H100")', True),
        ('device.attributes["dra-driver.io"].family == "hopper"', True),  # qualified name -> its domain
        ('"family" in device.attributes["gpu.nvidia.com"]', False),
        ('device.capacity["dra-driver.io"].slots == quantity("4")', True),
        ('device.attributes[device.driver].index in [0, 1]', True),
        ('device.attributes["gpu.nvidia.com"].mig == false', True),
        ('size(device.attributes["other.example.com"]) == 0', True),  # unknown domain -> empty map
        ('"x" in device.attributes["other.example.com"]', False),
        ('has(device.attributes["gpu.nvidia.com"].type)', True),
        ('has(device.attributes["gpu.nvidia.com"].nosuch)', False),
        ('!has(device.attributes["other.example.com"].nosuch)', True),
        ('device.attributes["gpu.nvidia.com"].nosuch == 1 || true', True),  # || absorbs errors
        ('true || device.attributes["gpu.nvidia.com"].nosuch == 1', True),
        ('device.attributes["gpu.nvidia.com"].nosuch == 1 && false', False),  # && absorbs with false
        ('"nosuch" in device.attributes["gpu.nvidia.com"] && device.attributes["gpu.nvidia.com"].nosuch == 1', False),
        ('device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))', True),
        ('device.attributes["gpu.nvidia.com"].driverVersion.compareTo(semver("550.54.15")) == 0', True),
        ('device.attributes["gpu.nvidia.com"].driverVersion == semver("550.54.15")', True),
        ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) < 0', True),  # 81559Mi < 80Gi
        ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("80G"))', True),
        ('quantity("1Gi") == quantity("1024Mi")', True),
        ('1 < 2.5 && 3u >= 2', True),  # cross-type numeric comparisons
        ('device.attributes["gpu.nvidia.com"].index == 0 ? true : device.attributes["gpu.nvidia.com"].nosuch', True),
    ],
)
def test_device_semantics(gpu, expression: str, expected: bool) -> None:
    assert run(expression, gpu) is expected


@pytest.mark.parametrize(
    "expression, message",
    [
        ('device.attributes["gpu.nvidia.com"].nosuch == "x"', "nosuch"),  # missing identifier
        ('device.attributes["other.example.com"].foo == 1', "foo"),  # unknown domain, then missing name
        ('device.attributes["gpu.nvidia.com"].nosuch == 1 || false', "nosuch"),
        ('has(device.attributes["gpu.nvidia.com"].type.x)', "field selection"),
        ('dyn(device.capacity["gpu.nvidia.com"].memory) < quantity("1Gi")', "overload"),  # no ordering ops; dyn hides it from the checker
        ('device.attributes["gpu.nvidia.com"].driverVersion > semver("1.0.0")', "overload"),
        ('semver("not-a-version").major() == 1', "semver"),
        ('quantity("12 apples").sign() == 1', "quantity"),
        ('device.attributes["gpu.nvidia.com"].index / 0 == 1', "division"),
        ('9223372036854775807 + 1 > 0', "overflow"),
        ('[1, 2][5] == 1', "index"),
    ],
)
def test_runtime_errors(gpu, expression: str, message: str) -> None:
    with pytest.raises(CelRuntimeError) as info:
        run(expression, gpu)
    assert message in str(info.value)
    assert info.value.expression == expression


@pytest.mark.parametrize(
    "expression", ['device.attributes["gpu.nvidia.com"].index', 'device.attributes["gpu.nvidia.com"].productName + ""']
)
def test_non_bool_dyn_result_is_runtime_error(gpu, expression: str) -> None:
    # Attribute values are dyn: only evaluation shows the result is not a bool.
    with pytest.raises(CelRuntimeError, match="must return bool"):
        run(expression, gpu)


@pytest.mark.parametrize(
    "expression, message",
    [
        ("device.driver ==", "Syntax error"),
        ("", "empty"),
        ("nosuchvar == 1", "undeclared reference to 'nosuchvar'"),
        ('device.name == "x"', "undefined field 'name'"),
        ('"a".noSuchMethod()', "noSuchMethod"),
        ("noSuchFunction(1)", "noSuchFunction"),
        ('quantity("1").isZero()', "isZero"),  # not in the Kubernetes quantity library
        ("[1].reduce(a, b, 0, a + b) == 1", "reduce"),  # cel-python extension, not CEL
        ("[1].all(x) == 1", "takes 2 or 3"),
        ("cel.bind(x, 1) == 1", "three arguments"),
        ("[1].map(1, 2) == [2]", "simple identifier"),
    ],
)
def test_compile_errors(expression: str, message: str) -> None:
    with pytest.raises(CelCompileError) as info:
        compile_selector(expression)
    assert message in str(info.value)
    assert not isinstance(info.value, CelNotSupported)


def test_allow_multiple_allocations_depends_on_the_environment() -> None:
    """The scheduler always declares it; API-server validation of a new selector only with DRAConsumableCapacity."""
    expression = "device.allowMultipleAllocations"
    shared = cel_device("d", {"name": "a", "allowMultipleAllocations": True})
    plain = cel_device("d", {"name": "b"})
    assert compile_selector(expression).evaluate(shared) is True
    assert compile_selector(expression).evaluate(plain) is False
    assert compile_selector(expression, environment=api_server(consumable_capacity=True)).evaluate(shared) is True
    with pytest.raises(CelCompileError, match="undefined field 'allowMultipleAllocations'"):
        compile_selector(expression, environment=api_server(consumable_capacity=False))


@pytest.mark.parametrize(
    "expression",
    [
        'device.attributes["gpu.nvidia.com"].?type == "gpu"',
        'device.attributes[?"gpu.nvidia.com"].hasValue()',
        'url("https://x").getHost() == "x"',
        'ip("10.0.0.1").family() == 4',
        'format.dns1123Label().validate("x").hasValue()',
        "[1, 2].reverse() == [2, 1]",
        '{"a": 1}.transformMap(k, v, v + 1) == {"a": 2}',
        ".device.driver == 'x'",
    ],
)
def test_not_supported_features_are_reported(expression: str) -> None:
    with pytest.raises(CelNotSupported):
        compile_selector(expression)


def test_length_limit_counts_bytes() -> None:
    fits = "true" + " " * (10240 - 4)
    assert compile_selector(fits).expression == fits
    with pytest.raises(CelCompileError, match="10241 bytes"):
        compile_selector(fits + " ")
    multibyte = '"' + "é" * 5119 + '" != ""'  # 5119 characters, 10245 bytes
    with pytest.raises(CelCompileError, match="bytes"):
        compile_selector(multibyte)


def test_deep_nesting_is_a_compile_error_not_a_crash() -> None:
    with pytest.raises(CelCompileError, match="nest"):
        compile_selector("(" * 400 + "true" + ")" * 400)
    assert compile_selector("(" * 40 + "true" + ")" * 40).evaluate(cel_device("d", {"name": "x"})) is True


def test_hostile_expression_hits_the_budget(gpu) -> None:
    ten = "[0,1,2,3,4,5,6,7,8,9]"
    hostile = f"{ten}.all(a, {ten}.all(b, {ten}.all(c, {ten}.all(d, a + b + c + d >= 0))))"
    with pytest.raises(CelBudgetExceeded, match="actual cost limit exceeded .limit 20,000"):
        compile_selector(hostile, budget=20_000).evaluate(gpu)
    # The same shape with a smaller range stays within the budget and answers.
    assert compile_selector("[0,1].all(a, [0,1].all(b, a + b >= 0))", budget=20_000).evaluate(gpu) is True


def test_compile_is_cached_by_source() -> None:
    assert compile_selector("1 == 1") is compile_selector("1 == 1")


class TestBind:
    def test_bind_reuses_a_value(self, gpu) -> None:
        assert run('cel.bind(a, device.attributes["gpu.nvidia.com"], a.type == "gpu" && a.index == 0)', gpu)

    def test_inner_bind_shadows_outer_and_scope_ends(self, gpu) -> None:
        assert run("cel.bind(x, 1, cel.bind(x, x + 1, x == 2) && x == 1)", gpu)

    def test_bind_shadows_device_only_inside(self, gpu) -> None:
        assert run('cel.bind(device, 5, device == 5) && device.driver == "gpu.nvidia.com"', gpu)

    def test_bound_error_only_fails_when_used(self, gpu) -> None:
        assert run('cel.bind(bad, device.attributes["gpu.nvidia.com"].nosuch, true)', gpu)
        assert run('cel.bind(bad, device.attributes["gpu.nvidia.com"].nosuch, bad == 1 || true)', gpu)
        with pytest.raises(CelRuntimeError, match="nosuch"):
            run('cel.bind(bad, device.attributes["gpu.nvidia.com"].nosuch, bad == 1)', gpu)

    def test_bind_inside_macro_sees_the_iteration_variable(self, gpu) -> None:
        assert run("[1, 2, 3].map(v, cel.bind(w, v * 10, w + v)) == [11, 22, 33]", gpu)

    def test_bind_variable_is_not_visible_outside(self) -> None:
        with pytest.raises(CelCompileError, match="undeclared reference to 'x'"):
            compile_selector("cel.bind(x, 1, x == 1) && x == 1")

    def test_guarded_memory_selector_from_amd_docs(self, gpu) -> None:
        other = cel_device("gpu.amd.com", {"name": "gpu-1"})
        expression = 'cel.bind(cap, device.capacity["gpu.amd.com"], has(cap.memory) && cap.memory.compareTo(quantity("16Gi")) >= 0)'
        assert run(expression, other) is False


class TestMacros:
    @pytest.mark.parametrize(
        "expression",
        [
            "[1, 2, 3].all(x, x > 0)",
            "![1, 2, 3].all(x, x > 1)",
            "[1, 2, 3].exists(x, x == 2)",
            "[1, 2, 3].exists_one(x, x > 2)",
            "![1, 2, 3].exists_one(x, x > 1)",
            "[1, 2, 3].existsOne(x, x == 1)",
            "[1, 2, 3].map(x, x * 2) == [2, 4, 6]",
            "[1, 2, 3].map(x, x > 1, x * 2) == [4, 6]",
            "[1, 2, 3].filter(x, x != 2) == [1, 3]",
            '{"a": 1, "b": 2}.all(k, k in ["a", "b"])',
            '{"a": 1, "b": 2}.exists(k, v, k == "b" && v == 2)',
            "[10, 20].all(i, v, v == (i + 1) * 10)",
            "[5, 5].existsOne(i, v, i == 1 && v == 5)",
            "[3, 4].transformList(i, v, i + v) == [3, 5]",
            "[3, 4, 5].transformList(i, v, v > 3, i) == [1, 2]",
            "[[1, 2], [3]].exists(l, l.exists(x, x == 3))",
        ],
    )
    def test_macro(self, gpu, expression: str) -> None:
        assert run(expression, gpu) is True

    def test_exists_true_absorbs_errors_but_all_errors_without_a_false(self, gpu) -> None:
        assert run('[0, 1].exists(x, 1 / x == 1)', gpu) is True  # 1/0 errors, 1/1 decides
        assert run('[0, 1].all(x, x == 5 && 1 / x == 1)', gpu) is False
        with pytest.raises(CelRuntimeError):
            run("[0, 1].all(x, 1 / x >= 0)", gpu)
        with pytest.raises(CelRuntimeError):
            run("[0, 1].map(x, 1 / x) == [1]", gpu)

    def test_macro_variable_shadows_device(self, gpu) -> None:
        assert run("[1].all(device, device == 1)", gpu)


class TestReferencedKeys:
    def test_keys_of_a_typical_selector(self) -> None:
        selector = compile_selector(
            'device.driver == "gpu.nvidia.com" && "type" in device.attributes["gpu.nvidia.com"] && '
            'device.attributes["gpu.nvidia.com"].type == "gpu" && device.capacity[device.driver].memory.isGreaterThan(quantity("1Gi"))'
        )
        assert selector.referenced_keys == {
            ReferencedKey("driver", "", ""),
            ReferencedKey("attribute", "gpu.nvidia.com", "type"),
            ReferencedKey("capacity", None, "memory"),
        }

    def test_domain_presence_is_a_key(self) -> None:
        selector = compile_selector('"dra-driver.io" in device.attributes')
        assert selector.referenced_keys == {ReferencedKey("attribute", "dra-driver.io", "")}

    @pytest.mark.parametrize(
        "expression",
        [
            'size(device.attributes["gpu.nvidia.com"]) > 0',
            'device.attributes["gpu.nvidia.com"].exists(k, k == "type")',
            'cel.bind(a, device.attributes["gpu.nvidia.com"], a.type == "gpu")',
            'device.attributes[device.attributes["gpu.nvidia.com"].type].x == 1',
        ],
    )
    def test_undeterminable_reads_give_none(self, expression: str) -> None:
        assert compile_selector(expression).referenced_keys is None

    def test_group_key_separates_devices_that_can_differ(self, gpu) -> None:
        selector = compile_selector('device.attributes["gpu.nvidia.com"].index == 0')
        other_index = cel_device("gpu.nvidia.com", {**DEVICE, "attributes": {**DEVICE["attributes"], "index": {"int": 1}}})
        missing = cel_device("gpu.nvidia.com", {"name": "x"})
        same = cel_device("gpu.nvidia.com", {**DEVICE, "name": "gpu-9"})
        assert selector.group_key(gpu) == selector.group_key(same)
        assert selector.group_key(gpu) != selector.group_key(other_index)
        assert selector.group_key(gpu) != selector.group_key(missing)

    def test_group_key_distinguishes_bool_from_int(self) -> None:
        selector = compile_selector('device.attributes["d.io"].v == 1')
        as_int = cel_device("d.io", {"name": "a", "attributes": {"v": {"int": 1}}})
        as_bool = cel_device("d.io", {"name": "b", "attributes": {"v": {"bool": True}}})
        assert selector.group_key(as_int) != selector.group_key(as_bool)


class TestDeviceConversion:
    def test_bad_wire_values_name_the_device_and_field(self) -> None:
        with pytest.raises(ValueError, match="gpu-7.*memory"):
            cel_device("gpu.nvidia.com", {"name": "gpu-7", "capacity": {"memory": {"value": "lots"}}})
        with pytest.raises(ValueError, match="driverVersion"):
            cel_device("gpu.nvidia.com", {"name": "g", "attributes": {"driverVersion": {"version": "550.54"}}})
        with pytest.raises(ValueError, match="exactly one"):
            cel_device("gpu.nvidia.com", {"name": "g", "attributes": {"x": {"int": 1, "bool": True}}})
