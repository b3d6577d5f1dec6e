"""The Kubernetes 1.35 DRA CEL environment on cel-python (docs/cel.md).

Public API:
    compile_selector(expression, environment=SCHEDULER) -> CompiledSelector   (cached; api_server(gate) for validation)
    CompiledSelector.max_cost / cost_problem()           (the API server's estimate and its refusal)
    cel_device(driver, slice_device) -> CelDevice        (build once per device)
    CompiledSelector.evaluate(device) -> bool            (CelRuntimeError on errors)
    CompiledSelector.referenced_keys / group_key(device) (evaluate once per group)
"""

from __future__ import annotations

from dra_driver.cel.analysis import ReferencedKey
from dra_driver.cel.device import CelDevice, cel_device
from dra_driver.cel.environment import SCHEDULER, CelEnvironment, api_server
from dra_driver.cel.errors import CelBudgetExceeded, CelCompileError, CelError, CelNotSupported, CelRuntimeError
from dra_driver.cel.selector import DEFAULT_COST_BUDGET, MAX_EXPRESSION_BYTES, CompiledSelector, compile_selector
from dra_driver.cel.types import Quantity, Semver

__all__ = [
    "DEFAULT_COST_BUDGET",
    "MAX_EXPRESSION_BYTES",
    "SCHEDULER",
    "CelBudgetExceeded",
    "CelEnvironment",
    "CelCompileError",
    "CelDevice",
    "CelError",
    "CelNotSupported",
    "CelRuntimeError",
    "CompiledSelector",
    "Quantity",
    "ReferencedKey",
    "Semver",
    "api_server",
    "cel_device",
    "compile_selector",
]
