"""Admin access as the API server allows it: only in namespaces labelled for it.

A request with `adminAccess: true` is forbidden unless the claim's namespace carries
`resource.kubernetes.io/admin-access: "true"` (k8s.io/api resource/v1/types.go): the API server refuses to
create the claim, so explain reports it as invalid input, never as allocatable. explain knows
a namespace's labels from `--namespace-labels`, a Namespace object in the input file or
`--kubeconfig`. A namespace it knows nothing about carries no such label (only an
administrator adds it), so `explain` refuses there too and says how to tell it otherwise;
callers that only sketch a claim (template) get a note instead. With the DRAAdminAccess gate
off the API server drops the field.
"""

from __future__ import annotations

from collections.abc import Mapping

from dra_driver.common.errors import FieldError
from dra_driver.ingest.errors import InputError
from dra_driver.explain.gates import FeatureGates
from dra_driver.explain.subject import ClaimInput
from dra_driver.model.names import is_dns_label
from dra_driver.model.validation import label_key_problem

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
FLAG = "--namespace-labels"


def admin_access_problems(
    claims: list[ClaimInput],
    namespaces: Mapping[str, Mapping[str, str]],
    gates: FeatureGates,
    unknown_is_unlabelled: bool = False,
) -> tuple[list[FieldError], list[str]]:
    """(errors the API server would return, notes) for every request that asks for admin access.

    `unknown_is_unlabelled`: a namespace missing from `namespaces` is refused (explain's
    answer) instead of noted as unchecked."""
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
            if labels is None and not unknown_is_unlabelled:
                notes.append(
                    f'{path}: allowed only if namespace {claim.namespace!r} has the label {ADMIN_ACCESS_LABEL}="true"; explain could not check (use '
                    '--kubeconfig or add the Namespace object to the file)'
                )
            elif (labels or {}).get(ADMIN_ACCESS_LABEL) != "true":
                errors.append(FieldError(path, _forbidden(claim.namespace, known=labels is not None)))
    return errors, notes


def _forbidden(namespace: str, known: bool) -> str:
    why = (
        f"namespace {namespace!r} does not have it"
        if known
        else f"explain was not told the labels of namespace {namespace!r}, and a namespace has it only where an administrator set it"
    )
    return (
        f'Forbidden: the API server refuses to create this claim: admin access to devices requires the label {ADMIN_ACCESS_LABEL}="true" '
        f"on the claim's namespace ({why}); label the namespace (kubectl label namespace {namespace} {ADMIN_ACCESS_LABEL}=true) or drop adminAccess. "
        f"If it is labelled, tell explain with {FLAG} {namespace}={ADMIN_ACCESS_LABEL}=true, a Namespace object in the file, or --kubeconfig"
    )


def parse_namespace_labels(entries: list[str]) -> dict[str, dict[str, str]]:
    """`NAMESPACE=KEY=VALUE[,KEY=VALUE...]` entries (repeatable) -> namespace -> labels; InputError naming the bad entry."""
    found: dict[str, dict[str, str]] = {}
    errors: list[FieldError] = []
    for entry in entries:
        namespace, sep, rest = entry.partition("=")
        if not sep or not is_dns_label(namespace):
            errors.append(
                FieldError(
                    FLAG, f"{entry!r}: write NAMESPACE=KEY=VALUE[,KEY=VALUE], e.g. ml={ADMIN_ACCESS_LABEL}=true (the namespace must be a DNS label)"
                )
            )
            continue
        labels = found.setdefault(namespace, {})
        for pair in filter(None, rest.split(",")):
            key, has_value, value = pair.partition("=")
            problem = label_key_problem(key) if has_value else "needs KEY=VALUE"
            if problem:
                errors.append(FieldError(FLAG, f"{entry!r}: label {pair!r}: {problem}"))
                continue
            labels[key] = value
    if errors:
        raise InputError(errors)
    return found
