"""The API server's compile-time cost estimate and the runtime cost limit."""

from __future__ import annotations

import pytest

from dra_driver.allocator import CelMatcher
from dra_driver.cel import CelBudgetExceeded, cel_device, compile_selector

TEN = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
# Kubernetes' own "expensive" case: seven nested loops over ten elements.
EXPENSIVE = f"{TEN}.all(x, {TEN}.all(y, {TEN}.all(z, {TEN}.all(z2, {TEN}.all(z3, {TEN}.all(z4, {TEN}.all(z5, int('1'.find('[0-9]*')) < 100)))))))"
TYPICAL = 'device.driver == "gpu.nvidia.com" && device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'


def test_expensive_selector_estimate_is_the_api_servers() -> None:
    selector = compile_selector(EXPENSIVE)
    assert selector.max_cost == 85_555_551
    problem = selector.cost_problem()
    assert problem is not None and "too complex, exceeds cost limit" in problem and "85,555,551" in problem


@pytest.mark.parametrize(
    ("expression", "cost"),
    [
        # driver (2) == 14-char literal (ceil 1.4) + capacity read (4), quantity (1), compareTo (1), >= (1)
        (TYPICAL, 2 + 2 + 4 + 1 + 1 + 1),
        # range (2) + result (1) + 32 declared domains x (condition 3 + step 1 + startsWith: d 1 + ceil(0.6))
        ('device.attributes.exists(d, d.startsWith("nvidia"))', 2 + 1 + 32 * (3 + 1 + 2)),
        # read (4) + ceil((64 declared characters + 1) x 0.1) x ceil(4 x 0.25)
        ('device.attributes["a"].name.matches("^x+$")', 4 + 7 * 1),
    ],
)
def test_estimates_follow_declared_sizes(expression: str, cost: int) -> None:
    selector = compile_selector(expression)
    assert selector.max_cost == cost
    assert selector.cost_problem() is None


def test_scheduler_still_runs_an_over_estimate_selector_and_stops_at_the_runtime_limit() -> None:
    """kube-scheduler compiles stored selectors without the estimate check; the runtime limit stops them."""
    device = cel_device("dra.example.com", {"name": "d"})
    with pytest.raises(CelBudgetExceeded, match="actual cost limit exceeded"):
        compile_selector(EXPENSIVE).evaluate(device)


def test_validation_rejects_with_the_figure_but_matching_compiles() -> None:
    matcher = CelMatcher()
    assert "estimated cost 85,555,551 exceeds budget 1,000,000" in (matcher.compile_problem(EXPENSIVE) or "")
    assert matcher.compile_problem(TYPICAL) is None
