"""Every case of Kubernetes' CEL tables, in both environments, with the gate off and on, against Go's answers.

The tables (cases.py) are Kubernetes' own test cases; oracle_go.json is what the real
v1.35.6 Go implementation returned for each in each (environment, DRAConsumableCapacity)
combination, including its worst-case cost estimate. Messages are checked the way the
Go tests check them (substring for the DRA table, regular expression for the libraries).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from conformance_tables import CASES, ORACLE, SKIP_REASON
from dra_driver.cel import CelCompileError, CelEnvironment, CelRuntimeError, cel_device, compile_selector

pytestmark = pytest.mark.skipif(not CASES, reason=SKIP_REASON)

COMBINATIONS = [(env, gate) for env in ("StoredExpressions", "NewExpressions") for gate in (False, True)]
PARAMS = [pytest.param(case, env, gate, id=f"{case['id']}-{env}-{'gate' if gate else 'nogate'}") for case in CASES for env, gate in COMBINATIONS]
# A Python implementation detail leaking into a message users see (e.g. StringType('x')).
PYTHON_TYPE_NAME = re.compile(r"\b(String|Int|Uint|Double|Bool|Bytes|Map|List)Type\b|celtypes|Decimal\(")


def _literal(kind: str, value: Any) -> str:
    """A CEL literal of the library case's expected value (or a same-typed witness)."""
    if kind == "quantity":
        return f'quantity("{value if value is not None else "0"}")'
    if kind == "semver":
        return f'semver("{value if value is not None else "0.0.0"}")'
    if kind == "bool":
        return "true" if value in (None, True) else "false"
    if kind == "double":
        return repr(float(value if value is not None else 0.0))
    return str(int(value if value is not None else 0))


def _selector_text(case: dict[str, Any]) -> str:
    """Boolean cases are selectors; other library cases become `(expr) == <expected>`, as the Go oracle ran them."""
    if case["id"].startswith("DRA/") or case["wrap_type"] == "bool":
        return case["expr"]
    expect = case["expect"]
    return f"({case['expr']}) == {_literal(case['wrap_type'], expect.get('value'))}"


def _device(case: dict[str, Any]) -> Any:
    wire: dict[str, Any] = {
        "name": "device",
        "attributes": case["attributes"],
        "capacity": {name: {"value": value} for name, value in case["capacity"].items()},
    }
    if case["allow_multiple_allocations"] is not None:
        wire["allowMultipleAllocations"] = case["allow_multiple_allocations"]
    return cel_device(case["driver"], wire)


def _message_matches(case: dict[str, Any], message: str) -> bool:
    wanted = case["expect"]["message"]
    return wanted in message if case["match"] == "substring" else re.search(wanted, message) is not None


def _outcome(case: dict[str, Any], env: str, gate: bool) -> tuple[str, Any, str, int | None]:
    """(kind, value, message, estimated cost) the way the oracle records them."""
    environment = CelEnvironment(kind=env, consumable_capacity=gate)
    try:
        selector = compile_selector(_selector_text(case), environment=environment)
    except CelCompileError as exc:
        return ("compile", None, exc.message, None)
    try:
        return ("value", selector.evaluate(_device(case)), "", selector.max_cost)
    except CelRuntimeError as exc:
        return ("runtime", None, exc.message, selector.max_cost)


@pytest.mark.parametrize(("case", "env", "gate"), PARAMS)
def test_case_agrees_with_go(case: dict[str, Any], env: str, gate: bool) -> None:
    go = ORACLE[(case["id"], env, gate)]
    kind, value, message, _ = _outcome(case, env, gate)
    assert kind == go["kind"], f"Go: {go.get('message', go.get('value'))!r}; here: {message or value!r}"
    if kind == "value":
        assert value == go["value"]
    else:
        assert not PYTHON_TYPE_NAME.search(message), message
        if case["expect"]["kind"] == f"{kind}_error":
            assert _message_matches(case, message), f"{message!r} does not match Go's {case['expect']['message']!r}"


@pytest.mark.parametrize(("case", "env", "gate"), [p for p in PARAMS if p.values[1:] == ("StoredExpressions", False)])
def test_estimated_cost_is_gos(case: dict[str, Any], env: str, gate: bool) -> None:
    go = ORACLE[(case["id"], env, gate)]
    kind, _, _, cost = _outcome(case, env, gate)
    if go["kind"] == "compile":
        assert kind == "compile"
        return
    assert cost == go["max_cost"]
