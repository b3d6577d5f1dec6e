"""Admin access as the API server allows it: only in namespaces labelled for it.

A request with `adminAccess: true` is forbidden unless the claim's namespace carries
`resource.kubernetes.io/admin-access: "true"` (k8s.io/api resource/v1/types.go). explain knows a
namespace's labels from `--kubeconfig` or from a Namespace object in the input file;
otherwise it says it could not check. With the DRAAdminAccess gate off the API server drops the field.
"""

from __future__ import annotations

from collections.abc import Mapping

from dra_driver.errors import FieldError
from dra_driver.explain.gates import FeatureGates
from dra_driver.explain.subject import ClaimInput

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"


def admin_access_problems(claims: list[ClaimInput], namespaces: Mapping[str, Mapping[str, str]], gates: FeatureGates) -> tuple[list[FieldError], list[str]]:
    """(errors the API server would return, notes) for every request that asks for admin access."""
    errors: list[FieldError] = []
    notes: list[str] = []
    for claim in claims:
        for index, request in enumerate(claim.spec.devices.requests):
            if not (request.exactly and request.exactly.admin_access):
                continue
            path = f"{claim.label}.devices.requests[{index}].exactly.adminAccess"
            if not gates.admin_access:
                notes.append(f"{path}: the DRAAdminAccess gate is off, so the API server drops adminAccess and the request is an ordinary one")
                continue
            labels = namespaces.get(claim.namespace)
            if labels is None:
                notes.append(f"{path}: allowed only if namespace {claim.namespace!r} has the label {ADMIN_ACCESS_LABEL}=\"true\"; explain could not check (use --kubeconfig or add the Namespace object to the file)")
            elif labels.get(ADMIN_ACCESS_LABEL) != "true":
                errors.append(FieldError(path, f"forbidden: admin access to devices requires the {ADMIN_ACCESS_LABEL}=\"true\" label on namespace {claim.namespace!r}; label the namespace or drop adminAccess"))
    return errors, notes
