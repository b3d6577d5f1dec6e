"""Compile-time type checking: what the Kubernetes API server rejects, and what it accepts.

Attribute values are `dyn` in Kubernetes, so comparisons on them always compile; literals,
`device.driver` (string) and function results have static types, and cel-go rejects a
mismatch there before the claim is ever stored. Rejecting too much is as wrong as too
little, so the accepted set below is broad (shipped classes, docs and anchor examples).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dra_driver.cel import CelCompileError, CelNotSupported, cel_device, compile_selector

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "expression, message",
    [
        ('device.driver == "gpu.nvidia.com" || device.driver == 1', "(string, int)"),
        ("device.driver != 1", "(string, int)"),
        ("device.driver in [1, 2]", "'@in'"),
        ("device.driver < 1", "'_<_'"),
        ('1 == "a"', "(int, string)"),
        ("1 == 1u", "(int, uint)"),
        ("1 == 1.0", "(int, double)"),  # numeric equality across types is only for dyn values
        ('[1, "a"] == []', "heterogeneous list"),
        ('{"a": 1, "b": "x"} == {}', "heterogeneous map value"),
        ('{"a": 1, 2: 1} == {}', "heterogeneous map key"),
        ('[[1], ["a"]] == []', "heterogeneous list"),
        ("[1, 2u].size() == 2", "heterogeneous list"),
        ('device["driver"] == "x"', "object"),
        ("device.attributes[1].x == 1", "_[_]"),
        ('"abc"[0] == "a"', "_[_]"),
        ("[1, 2][1u] == 2", "_[_]"),
        ('device.driver.foo == "x"', "field selection"),
        ("device.driver", "must evaluate to bool"),
        ('device.attributes["gpu.nvidia.com"]', "must evaluate to bool"),
        ("1 + 1", "must evaluate to bool"),
        ('quantity("1Gi")', "must evaluate to bool"),
        ("size(device.attributes)", "must evaluate to bool"),
        ("[1, 2].map(x, x > 1)", "must evaluate to bool"),
        ("true && 1", "'_&&_'"),
        ("!true || 1", "'_||_'"),
        ("!1", "'!_'"),
        ("1 ? true : false", "'_?_:_'"),
        ("[1].all(x, 1)", "predicate"),
        ('-"a" == "a"', "'-_'"),
        ("1 + 1.0 == 2.0", "'_+_'"),
        ("true + 1 == 2", "'_+_'"),
        ("[1] + [2.0] == [1]", "'_+_'"),
        ('quantity("1") < quantity("2")', "'_<_'"),  # Quantity has compareTo, no operators
        # capacity values are declared kubernetes.Quantity: the API server refuses operators on them
        ('device.capacity["gpu.nvidia.com"].memory < quantity("80Gi")', "applied to '(kubernetes.Quantity, kubernetes.Quantity)'"),
        ('device.capacity["gpu.nvidia.com"]["memory"] >= device.capacity["gpu.nvidia.com"].memory', "'_>=_'"),
        ('device.capacity["gpu.nvidia.com"].memory > 0', "(kubernetes.Quantity, int)"),
        ('device.capacity["gpu.nvidia.com"].memory == 1', "'_==_'"),
        ('cel.bind(c, device.capacity["gpu.nvidia.com"], c.memory < quantity("1"))', "'_<_'"),
        ('device.capacity["gpu.nvidia.com"].exists(k, v, v > 0)', "'_>_'"),  # map macro variables: key, value
        ('[quantity("1")].all(q, q < quantity("2"))', "'_<_'"),  # list macro variable: the element type
        (
            '"%d".format([device.capacity["gpu.nvidia.com"].memory]) == "1"',
            "decimal clause can only be used on integers, was given kubernetes.Quantity",
        ),
        ('"%.1f".format([quantity("1")]) == "1"', "fixed-point clause can only be used on doubles, was given kubernetes.Quantity"),
        ('"%.1f".format([1]) == "1"', "fixed-point clause can only be used on doubles, was given int"),
        (
            '"%s-%d".format([quantity("1"), 0]) == ""',
            "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps, was given "
            "kubernetes.Quantity",
        ),
        ('"%s".format([{"a": quantity("1")}]) == ""', "was given kubernetes.Quantity"),
        ('"%x".format([1.5]) == ""', "only integers, byte buffers, and strings can be formatted as hex, was given double"),
        ('"%b".format(["a"]) == ""', "only integers and bools can be formatted as binary, was given string"),
        ('"%s %s".format(["a"]) == ""', "index 1 out of range"),
        ('"%s".format(["a", "b"]) == ""', "too many arguments supplied to string.format (expected 1, got 2)"),
        ('"%q".format([1]) == ""', 'unrecognized formatting clause "q"'),
        # Quantity and Semver methods exist only on their own receivers and arguments
        ('device.driver.isGreaterThan(quantity("1"))', "'string.(kubernetes.Quantity)'"),
        ('quantity("1").compareTo(semver("1.0.0")) == 0', "'kubernetes.Quantity.(kubernetes.Semver)'"),
        ('semver("1.0.0").isLessThan(quantity("1"))', "isLessThan"),
        ('device.capacity["gpu.nvidia.com"].memory.major() == 1', "major"),
        ('semver("1.0.0").add(1).isInteger()', "add"),
        # an attribute is dyn, but no overload takes a string argument
        ('device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan("550.0.0")', "'dyn.(string)'"),
        ('device.attributes["gpu.nvidia.com"].driverVersion.compareTo("550.0.0") > 0', "compareTo"),
        ('(device.driver == "a" ? 1 : "b") == 1', "'(bool, int, string)'"),  # _?_:_ is (bool, A, A) -> A
        ("size(1) == 1", "'size' applied to '(int)'"),
        ("device.capacity['gpu.nvidia.com'].memory.size() == 1", "'size' applied to 'kubernetes.Quantity.()'"),
        ('quantity("1") == 1', "'_==_'"),
        ("[1] < [2]", "'_<_'"),
        ('"x".startsWith(1)', "startsWith"),
        ('(1).startsWith("a")', "startsWith"),
        ("quantity(1).sign() == 1", "quantity"),
        ("semver(1.0).major() == 1", "semver"),
    ],
)
def test_type_errors_are_compile_errors(expression: str, message: str) -> None:
    with pytest.raises(CelCompileError) as info:
        compile_selector(expression)
    assert not isinstance(info.value, CelNotSupported)
    assert message in info.value.message


def _shipped_class_selectors() -> list[str]:
    found = []
    for path in sorted((ROOT / "deviceclasses").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for selector in (doc or {}).get("spec", {}).get("selectors", []) or []:
                found.append(selector["cel"]["expression"])
    return found


REALISTIC = [
    # docs/cel.md, dra-api-facts.md 4.3 and anchors.md examples
    'device.capacity[device.driver].memory.compareTo(quantity("40Gi")) >= 0',
    'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.2.0"))',
    'device.attributes["dra-driver.io"].family in ["hopper", "blackwell", "cdna3", "gaudi3"]',
    'device.attributes["gaudi.intel.com"].moduleId < 4',
    'device.attributes["gpu.amd.com"].memoryPartition == "nps1"',
    'device.attributes["dra-driver.io"].interconnect != "none"',
    'device.attributes["gpu.nvidia.com"].productName in ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]',
    "device.attributes['gpu.nvidia.com'].type == 'gpu'",
    "device.attributes['compute-domain.nvidia.com'].id == 0",
    "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity(\"40Gi\"))",
    "device.capacity['gpu.example.com'].memory.compareTo(quantity('4Gi')) >= 0",
    "device.attributes[\"gpu.intel.com\"].driver == 'vfio-pci' || device.attributes[\"gpu.intel.com\"].driver == 'xe-vfio-pci'",
    '!has(device.attributes["gpu.amd.com"].computePartition) || device.attributes["gpu.amd.com"].computePartition == "spx"',
    'cel.bind(cap, device.capacity["gpu.amd.com"], has(cap.memory) && cap.memory.compareTo(quantity("16Gi")) >= 0)',
    # dyn values compile against anything (heterogeneous equality at run time)
    'device.attributes["dra-driver.io"].partition == 0',
    'device.attributes["gpu.nvidia.com"].index == "0" || device.attributes["gpu.nvidia.com"].index == 0.0',
    'device.attributes["gpu.nvidia.com"].index in [0u, 1u]',
    'device.attributes["gpu.nvidia.com"].index < 2.5 && device.attributes["gpu.nvidia.com"].index + 1 > 0',
    'device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("h100")',
    'device.attributes["gpu.nvidia.com"].productName.matches("^NVIDIA (A|H)100")',
    'device.attributes["gpu.nvidia.com"].driverVersion == semver("550.54.15")',
    'device.attributes["gpu.nvidia.com"].driverVersion.compareTo(semver("550.0.0")) >= 0',
    'device.attributes[device.driver].index in [0, 1] && device.driver.startsWith("gpu.")',
    '"dra-driver.io" in device.attributes && size(device.attributes["dra-driver.io"]) > 0',
    'device.attributes.exists(d, d.endsWith(".com")) && device.capacity.all(d, size(device.capacity[d]) >= 0)',
    'device.attributes["gpu.nvidia.com"].exists(k, v, k == "index" && v == 0)',
    "[1, 2, 3].map(x, x * 2).exists(x, x == 4) && [1, 2].filter(x, x > 1) == [2]",
    '[dyn(1), "a"].size() == 2 && [1, dyn("a")].size() == 2',  # dyn joins any element type
    '[[1], []].size() == 2 && {"a": [1], "b": []}.size() == 2 && [null, null].size() == 2',
    "1 < 2.5 && 2u >= 1 && 1.5 > 1u",  # cross-type numeric ordering is enabled in Kubernetes
    "dyn(1) == 1.0 && dyn(1u) == 1",
    'duration("1h") > duration("30m") && timestamp("2024-01-01T00:00:00Z") + duration("1h") > timestamp("2024-01-01T00:00:00Z")',
    '"%s-%s".format(["a", "b"]) == "a-b"',
    '"%s-%d %.2f %e %x %o %b %%".format([device.driver, 1, 1.5, "NaN", "ff", 8u, true]) != ""',  # each clause's own types
    '"%s %s %s".format([[1, 2], {"a": [true]}, null]) != "" && "%d".format([device.attributes["a"].x]) != ""',  # dyn: run time
    'quantity("1Gi") == quantity("1024Mi") && quantity("1").add(1).isInteger()',
    'device.driver == "gpu.nvidia.com" ? device.attributes["gpu.nvidia.com"].index == 0 : true',
    'int("12") + 1 == 13 && string(1) == "1" && double(3) / 2.0 == 1.5',
    '["a", "b"].join("-") == "a-b" && "a,b".split(",").size() == 2 && "abc".find("[a-z]+") == "abc"',
    'sets.contains(["a", "b"], ["a"]) && [3, 1].isSorted() == false && [1, 2].sum() == 3',
    "cel.bind(x, 1, cel.bind(x, 2, x)) == 2 && [1, 2].transformList(i, v, v * 2) == [2, 4]",
    'device.capacity["gpu.nvidia.com"].memory == quantity("80Gi") && device.capacity["gpu.nvidia.com"].memory.add(1).sign() == 1',
    'device.capacity["gpu.nvidia.com"].exists(k, v, k == "memory" && v.isGreaterThan(quantity("1")))',
    'device.capacity["gpu.nvidia.com"].memory.asApproximateFloat() > 1.0 && "%s".format([device.capacity["gpu.nvidia.com"].memory.asInteger()]) != '
    '""',
    'dyn(device.capacity["gpu.nvidia.com"].memory) < quantity("1")',  # dyn: left to run time, as cel-go does
    'device.attributes["a"].v.isLessThan(device.attributes["a"].w) && device.attributes["a"].q.add(1).sign() == 1',  # dyn arguments
    '(device.driver == "a" ? device.attributes["a"].x : 1) == 1 && (true ? [] : [1]).size() == 0 && (false ? null : 1) == 1',
    'size(device.attributes["gpu.nvidia.com"].productName) > 0 && sets.intersects(device.attributes["a"].l, [1])',
    '[semver("1.0.0")].exists(s, s.major() == 1) && device.attributes["gpu.nvidia.com"].driverVersion.major() >= 550',
]


@pytest.mark.parametrize("expression", _shipped_class_selectors() + REALISTIC)
def test_expressions_kubernetes_accepts_still_compile(expression: str) -> None:
    compile_selector(expression)


def test_shipped_classes_were_found() -> None:
    assert len(_shipped_class_selectors()) >= 5


@pytest.mark.parametrize(
    "expression, pattern",
    [
        ('"x".matches("[")', "["),
        ('matches("x", "(a")', "(a"),
        ('device.attributes["gpu.nvidia.com"].productName.find("a{2,1}") == ""', "a{2,1}"),
        ('device.driver.findAll("*").size() == 0', "*"),
    ],
)
def test_invalid_regex_literals_are_compile_errors(expression: str, pattern: str, capfd: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(CelCompileError) as info:
        compile_selector(expression)
    assert f"invalid regular expression {pattern!r}" in info.value.message
    assert "re2.cc" not in capfd.readouterr().err  # RE2's own error logging is silenced


def test_invalid_regex_at_runtime_is_quiet_and_names_the_pattern(capfd: pytest.CaptureFixture[str]) -> None:
    from dra_driver.cel import CelRuntimeError

    device = cel_device("d.io", {"name": "x", "attributes": {"re": {"string": "[unclosed"}}})
    selector = compile_selector('"x".matches(device.attributes["d.io"].re)')
    with pytest.raises(CelRuntimeError, match=r"invalid regular expression '\[unclosed'"):
        selector.evaluate(device)
    assert "re2.cc" not in capfd.readouterr().err


def test_matches_searches_anywhere_like_re2() -> None:
    device = cel_device("d.io", {"name": "x"})
    assert compile_selector('"NVIDIA H100".matches("H1[0-9]+")').evaluate(device) is True
    assert compile_selector('matches("NVIDIA H100", "^H100")').evaluate(device) is False


@pytest.mark.parametrize("expression", ["type(1) == int", 'type("a") == string', "type(1) == type(2)", "int == int"])
def test_type_values_are_not_supported(expression: str) -> None:
    with pytest.raises(CelNotSupported):
        compile_selector(expression)


@pytest.mark.parametrize("expression", ["math.greatest(1, 2) == 2", "math.least([1, 2]) == 1"])
def test_ext_math_is_not_in_the_kubernetes_environment(expression: str) -> None:
    # dra-api-facts.md 4.3: the 1.35 base environment has no ext.Math, so Kubernetes
    # reports an undeclared reference; it is not "a Kubernetes feature we lack".
    with pytest.raises(CelCompileError, match="undeclared reference to function 'math") as info:
        compile_selector(expression)
    assert not isinstance(info.value, CelNotSupported)
