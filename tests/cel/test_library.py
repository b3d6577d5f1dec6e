"""Each function of the 1.35 environment (quantity, semver, strings, lists, sets, regex)."""

from __future__ import annotations

import pytest

from dra_driver.cel import CelRuntimeError, cel_device, compile_selector

NOBODY = cel_device("x.example.com", {"name": "d"})

TRUE_EXPRESSIONS = [
    # quantity library
    'isQuantity("1.5Gi") && !isQuantity("1.5 Gi")',
    'quantity("-2").sign() == -1 && quantity("0").sign() == 0 && quantity("3m").sign() == 1',
    'quantity("2k").isInteger() && !quantity("1.5").isInteger() && !quantity("100E").isInteger()',
    'quantity("2k").asInteger() == 2000',
    'quantity("1.5").asApproximateFloat() == 1.5',
    'quantity("1Gi").add(quantity("1Gi")) == quantity("2Gi") && quantity("1Gi").add(1) == quantity("1073741825")',
    'quantity("1Gi").sub(quantity("512Mi")) == quantity("512Mi") && quantity("5").sub(2) == quantity("3")',
    'quantity("2Gi").isGreaterThan(quantity("2G")) && quantity("2G").isLessThan(quantity("2Gi"))',
    'quantity("1Ki").compareTo(quantity("1024")) == 0 && quantity("1").compareTo(quantity("2")) == -1',
    # semver library
    'isSemver("1.2.3-rc.1+build") && !isSemver("v1.2") && isSemver("v1.2", true)',
    'semver("1.2", true) == semver("1.2.0") && semver("v01.2.3", true).major() == 1',
    'semver("10.20.30").major() == 10 && semver("10.20.30").minor() == 20 && semver("10.20.30").patch() == 30',
    'semver("1.0.0").isGreaterThan(semver("1.0.0-rc.1"))',
    'semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))',
    'semver("1.0.0-alpha.2").compareTo(semver("1.0.0-alpha.10")) == -1',
    'semver("1.0.0-2").isLessThan(semver("1.0.0-alpha"))',
    'semver("1.0.0+a").compareTo(semver("1.0.0+b")) == 0',
    # strings ext
    '"hello".charAt(1) == "e" && "hello".charAt(5) == ""',
    '"hello".indexOf("l") == 2 && "hello".indexOf("l", 3) == 3 && "hello".indexOf("z") == -1',
    '"hello".lastIndexOf("l") == 3 && "hello".lastIndexOf("l", 2) == 2 && "hello".lastIndexOf("") == 5',
    '"MiXeD é".lowerAscii() == "mixed é" && "MiXeD é".upperAscii() == "MIXED é"',
    '"a-b-c".replace("-", "+") == "a+b+c" && "a-b-c".replace("-", "+", 1) == "a+b-c"',
    '"a,b,c".split(",") == ["a", "b", "c"] && "a,b,c".split(",", 2) == ["a", "b,c"] && "a,b".split(",", 0) == []',
    '"hello".substring(1) == "ello" && "hello".substring(1, 3) == "el"',
    '"  x y \\t".trim() == "x y"',
    '["a", "b"].join() == "ab" && ["a", "b"].join("-") == "a-b"',
    '"%s is %d (%.2f) %x %%".format([dyn("gpu"), dyn(3), dyn(1.5), dyn(255)]) == "gpu is 3 (1.50) ff %"',  # mixed literals need dyn
    'strings.quote("a\\"b") == "\\"a\\\\\\"b\\""',
    # regex
    '"gpu-12-mig".find("[0-9]+") == "12" && "abc".find("[0-9]") == ""',
    '"a1b22c333".findAll("[0-9]+") == ["1", "22", "333"] && "a1b22c333".findAll("[0-9]+", 2) == ["1", "22"]',
    '"NVIDIA H100".matches("^NVIDIA H1[0-9]+$")',
    # lists lib
    '[1, 2, 2, 3].isSorted() && ![2, 1].isSorted() && ["a", "b"].isSorted()',
    '[1, 2, 3].sum() == 6 && [1.5, 2.5].sum() == 4.0 && [].sum() == 0',
    '[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3 && ["b", "a"].min() == "a"',
    '[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2 && [1].indexOf(5) == -1',
    # sets ext
    'sets.contains([1, 2, 3], [3, 1]) && !sets.contains([1], [2]) && sets.contains([1], [])',
    'sets.equivalent([1, 2, 2], [2, 1]) && !sets.equivalent([1], [1, 2])',
    'sets.intersects([1, 2], [2, 5]) && !sets.intersects([1], [2])',
    'sets.contains([1], [1.0])',  # CEL numeric equality across types
    # standard
    'size("abc") == 3 && "abc".size() == 3 && size([1]) == 1 && "abc".contains("b") && "abc".endsWith("c")',
    'int("5") == 5 && string(5) == "5" && double(1) == 1.0 && dyn(1) == 1',
]


@pytest.mark.parametrize("expression", TRUE_EXPRESSIONS)
def test_function(expression: str) -> None:
    assert compile_selector(expression).evaluate(NOBODY) is True


@pytest.mark.parametrize(
    "expression, message",
    [
        ('quantity("1.5").asInteger() == 1', "asInteger"),
        ('quantity("1").compareTo(dyn(semver("1.0.0"))) == 0', "compareTo"),  # dyn: only known at run time
        ('semver("1.0.0").isGreaterThan(dyn(quantity("1")))', "isGreaterThan"),
        ('"abc".charAt(9) == ""', "charAt"),
        ('"abc".substring(2, 1) == ""', "substring"),
        ('"abc".indexOf("a", 10) == 0', "index"),
        ('[].min() == 0', "empty"),
        ('[dyn(1), "a"].max() == 1', "max"),
        ('[dyn("a"), 1].join() == ""', "join"),
        ('"%d".format([dyn("x")]) == ""', "format"),  # a dyn argument: only known at run time
        ('"%s %s".format(dyn(["x"])) == ""', "format"),
        ('"abc".find(dyn("[")) == ""', "regular expression"),  # not a literal: checked at run time
        ('[dyn(true), 1].sum() == 1', "sum"),
    ],
)
def test_function_errors(expression: str, message: str) -> None:
    with pytest.raises(CelRuntimeError) as info:
        compile_selector(expression).evaluate(NOBODY)
    assert message in str(info.value)


def test_trim_strips_go_whitespace_only() -> None:
    # cel-go trim is Go strings.TrimSpace (Unicode White_Space); U+001C..U+001F are kept.
    assert compile_selector('" \\u001c x \\u001c ".trim() == "\\u001c x \\u001c"').evaluate(NOBODY) is True
    assert compile_selector('"\\u0085\\u00a0\\u3000x\\u2028\\t".trim() == "x"').evaluate(NOBODY) is True


@pytest.mark.parametrize(
    "raw, quoted",
    [
        ("a\x07b", '"a\\ab"'),  # cel-go writes \a, not \u0007
        ("\b\f\n\r\t\v", '"\\b\\f\\n\\r\\t\\v"'),
        ('back\\slash "q"', '"back\\\\slash \\"q\\""'),
        ("é\x01", '"é\x01"'),  # other characters are copied as they are
    ],
)
def test_strings_quote_matches_cel_go(raw: str, quoted: str) -> None:
    from dra_driver.cel.library import quote

    assert quote(raw) == quoted


@pytest.mark.parametrize("expression", ['"%s".format([b"x"]) == "x"', '"%s".format([dyn(1.0)]) == "1"', '"%s".format([[2.5]]) == "[2.5]"'])
def test_format_refuses_what_it_would_render_differently(expression: str) -> None:
    with pytest.raises(CelRuntimeError, match="not supported"):
        compile_selector(expression).evaluate(NOBODY)
