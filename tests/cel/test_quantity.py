"""Quantities are normalised the way Kubernetes' resource.ParseQuantity stores them.

apimachinery quantity.go: a non-zero magnitude is rounded *up* (away from zero, inf.RoundUp)
to nano precision ("if you want some resources, you should get some resources"), and a
binary-SI value ("Ki".."Ei") above the int64 maximum is capped at it.
"""

from __future__ import annotations

import pytest

from dra_driver.cel import Quantity, cel_device, compile_selector

NOBODY = cel_device("x.example.com", {"name": "d"})


@pytest.mark.parametrize(
    "expression",
    [
        'quantity("1.0000000001").compareTo(quantity("1.000000001")) == 0',  # finer than nano rounds up
        'quantity("1.0000000001") == quantity("1.000000001")',
        'quantity("-1.0000000001") == quantity("-1.000000001")',  # away from zero
        'quantity("0.1n") == quantity("1n") && quantity("1.5e-10").isGreaterThan(quantity("0"))',
        'quantity("1.1e-9") == quantity("2n")',
        'quantity("1.000000001").isGreaterThan(quantity("1"))',  # exactly nano: kept
        'quantity("0") == quantity("0n") && quantity("0.0000000000").sign() == 0',
        'quantity("8Ei") == quantity("9223372036854775807") && quantity("100Ei").isInteger()',  # BinarySI cap
        'quantity("10E").isGreaterThan(quantity("9223372036854775807"))',  # decimal SI is not capped
    ],
)
def test_parse_normalisation_matches_kubernetes(expression: str) -> None:
    assert compile_selector(expression).evaluate(NOBODY) is True


def test_device_capacity_uses_the_same_rounding() -> None:
    device = cel_device("d.io", {"name": "x", "capacity": {"slots": {"value": "1.0000000001"}}})
    assert compile_selector('device.capacity["d.io"].slots == quantity("1.000000001")').evaluate(device) is True
    assert Quantity.parse("123456789012345678901.0000000001").value == Quantity.parse("123456789012345678901.000000001").value
