"""CEL heterogeneous equality and ordering, as cel-go evaluates them on dyn attribute values.

Attribute values are `dyn` in the Kubernetes DRA environment (map(string, dyn)), so mixed
comparisons compile there and evaluate with CEL's runtime rules: a bool never equals a
number, int/uint/double compare numerically, other kinds are simply unequal; ordering or
arithmetic across non-numeric kinds is a "no such overload" error.
"""

from __future__ import annotations

import pytest

from dra_driver.cel import CelRuntimeError, cel_device, compile_selector

GPU = cel_device(
    "gpu.nvidia.com",
    {
        "name": "gpu-0",
        "attributes": {
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "index": {"int": 0},
            "mig": {"bool": False},
            "enabled": {"bool": True},
            "dra-driver.io/partition": {"bool": False},
        },
    },
)
ATTR = 'device.attributes["gpu.nvidia.com"]'


def run(expression: str) -> bool:
    return compile_selector(expression).evaluate(GPU)


@pytest.mark.parametrize(
    "expression, expected",
    [
        # the audit's blocker: a bool attribute compared with 0 must not match
        ('device.attributes["dra-driver.io"].partition == 0', False),
        ('device.attributes["dra-driver.io"].partition != 0', True),
        (f"{ATTR}.mig == 0", False),
        (f"{ATTR}.enabled == 1", False),
        (f"{ATTR}.index == false", False),
        (f"{ATTR}.index in [false]", False),
        (f"{ATTR}.mig in [0, 1]", False),
        (f"[{ATTR}.mig] == [0]", False),
        (f'{{"a": {ATTR}.mig}} == {{"a": 0}}', False),
        (f"{ATTR}.mig in {{0: 1}}", False),
        (f"{ATTR}.mig == false", True),
        (f"[{ATTR}.mig] == [false]", True),
        # mixed kinds on dyn values are plain false/true, never errors (finding 2)
        (f'{ATTR}.index == "0"', False),
        (f"{ATTR}.productName != 1", True),
        (f'{ATTR}.index in ["0", "1"]', False),
        (f'{ATTR}.productName == "x" || {ATTR}.productName == 1', False),
        (f"{ATTR}.productName == null", False),
        # numbers compare by value across int, uint and double
        (f"{ATTR}.index == 0.0", True),
        (f"{ATTR}.index == 0u", True),
        (f"{ATTR}.index in [0.0, 2.5]", True),
        (f"{ATTR}.index in {{0u: 1}}", True),
        (f"{{0: 7}}[{ATTR}.index + 0] == 7", True),
        ('{1: "a"}[dyn(1.0)] == "a"', True),
        (f"[dyn(0.5)] == [{ATTR}.index]", False),
        ("dyn(1) == 1.0", True),
        ("dyn(1u) == 1", True),
        (f"{ATTR}.index < 0.5 && {ATTR}.index >= 0u", True),
        ("false < true", True),
    ],
)
def test_heterogeneous_equality(expression: str, expected: bool) -> None:
    assert run(expression) is expected


@pytest.mark.parametrize(
    "expression",
    [
        f"{ATTR}.mig < 1",  # no ordering between bool and int
        f"{ATTR}.enabled >= 0.0",
        f'{ATTR}.index < "1"',
        f"{ATTR}.index + true == 1",  # no arithmetic on bools
        f"{ATTR}.index - {ATTR}.mig == 0",
        f"{ATTR}.index * true == 0",
        f"{ATTR}.index / {ATTR}.enabled == 0",
        f"{ATTR}.index % {ATTR}.enabled == 0",
        f"-{ATTR}.mig == 0",
        f"dyn([{ATTR}.index]) < [1]",
        f"{ATTR}.enabled && {ATTR}.index",  # a non-bool operand of && / || / ?:
        f"{ATTR}.index || false",
        f"{ATTR}.index ? true : false",
        f"[1, 2][{ATTR}.mig] == 1",  # a bool is not a list index
        f"{{1: true}}[{ATTR}.enabled]",  # nor a key equal to 1
    ],
)
def test_mixed_kind_ordering_and_arithmetic_are_runtime_errors(expression: str) -> None:
    with pytest.raises(CelRuntimeError):
        run(expression)


def test_logic_absorbs_errors_and_non_bools_only_with_the_deciding_value() -> None:
    # cel-go: false && anything is false, true || anything is true, from either side.
    assert run(f"{ATTR}.index && false") is False
    assert run(f"{ATTR}.index || true") is True
