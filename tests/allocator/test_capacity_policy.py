"""The scheduler's consumed-amount rules for one capacity of a shared device, case by case."""

from __future__ import annotations

from decimal import Decimal

import pytest

from dra_driver.allocator.capacity import RequestPolicy, consumed_amount, policy_violation

D = Decimal
RANGE = RequestPolicy(default=D(4), minimum=D(2), maximum=D(10), step=D("0.5"))


@pytest.mark.parametrize(
    ("requested", "policy", "consumed"),
    [
        (None, None, D(16)),  # nothing asked, no policy: the whole capacity
        (None, RANGE, D(4)),  # nothing asked: the default
        (D(3), None, D(3)),  # no policy: as asked
        (D(1), RANGE, D(2)),  # below min: min
        (D("2.1"), RANGE, D("2.5")),  # fractional step, exact decimal arithmetic
        (D(3), RequestPolicy(default=D(4), minimum=D(2)), D(3)),  # a range without step: as asked
        (D(5), RequestPolicy(default=D(4), valid_values=(D(4), D(8))), D(8)),
        (D(9), RequestPolicy(default=D(4), valid_values=(D(4), D(8))), D(9)),  # above them all: kept, then refused
    ],
)
def test_consumed_amount(requested: Decimal | None, policy: RequestPolicy | None, consumed: Decimal) -> None:
    assert consumed_amount(requested, D(16), policy) == consumed


def test_policy_violations() -> None:
    assert policy_violation(D(10), RANGE) is None
    assert policy_violation(D(11), RANGE) == "11 is above the request policy's maximum 10"
    assert policy_violation(D("2.2"), RANGE) == "2.2 is not 2 plus a multiple of 0.5"
    listed = RequestPolicy(default=D(4), valid_values=(D(4), D(8)))
    assert policy_violation(D(9), listed) == "9 is above the largest valid value 8"
    assert policy_violation(D(4), RequestPolicy(default=D(4), minimum=D(5))) is None  # the default is always allowed
    assert policy_violation(D(99), None) is None
