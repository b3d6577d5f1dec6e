"""The resource.k8s.io API group and the versions of it the driver speaks (v1; v1alpha3 for DeviceTaintRules), declared once.

Nothing of the driver is imported here: what only writes wire dicts (render.py, the slice publisher, the tools'
generated objects) names the version without loading resource_v1.py's pydantic types, which the daemon's publishing
path does not need (tests/cli/test_run_imports.py lists what the running daemon loads).
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "resource.k8s.io"
API_VERSION: Final = f"{GROUP}/v1"
# DeviceTaintRule (model/resource_v1alpha3.py) is served only in v1alpha3 (gate DRADeviceTaintRules).
TAINT_RULE_API_VERSION: Final = f"{GROUP}/v1alpha3"
