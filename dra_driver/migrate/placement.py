"""GPU node labels in a pod's placement (nodeSelector, required node affinity) moved onto its device requests.

A label leaves the placement only when it was translated for every request
of its vendor; otherwise it stays exactly as it was and the report says why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ruamel.yaml.comments import CommentedMap

from dra_driver.migrate.context import Context
from dra_driver.migrate.edit import remove_key
from dra_driver.migrate.labels import Requirement, is_gpu_label, label_vendor, translate
from dra_driver.migrate.report import Action
from dra_driver.migrate.resources import DeviceKind
from dra_driver.sources.workloads import Workload

AFFINITY = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")


@dataclass
class PlacementPlan:
    selectors: dict[str, list[str]] = field(default_factory=dict)  # resource -> CEL
    removals: list[Callable[[], object]] = field(default_factory=list)  # what each returns is not used
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def selectors_for(self, kind: DeviceKind) -> list[str]:
        return list(self.selectors.get(kind.resource, []))

    def apply(self) -> None:
        for removal in self.removals:
            removal()
        for cleanup in self.cleanups:
            cleanup()


@dataclass(frozen=True)
class _Found:
    requirement: Requirement
    path: str
    remove: Callable[[], object]  # takes the requirement off the pod spec (what it returns is not used)


def _node_selector(ctx: Context, workload: Workload) -> tuple[list[_Found], Callable[[], None] | None]:
    spec = workload.pod_spec
    selector = spec.get("nodeSelector")
    if not isinstance(selector, CommentedMap):  # every map of a round-trip loaded document is one
        return [], None
    found = [
        _Found(Requirement(str(label), "In", (str(value),)), f"{workload.spec_path}.nodeSelector", partial(remove_key, selector, label))
        for label, value in selector.items()
        if is_gpu_label(str(label))
    ]

    def cleanup() -> None:
        if "nodeSelector" in spec and not spec["nodeSelector"]:
            remove_key(spec, "nodeSelector")

    return found, cleanup


def _get(node: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _required_affinity(ctx: Context, workload: Workload) -> tuple[list[_Found], Callable[[], None] | None]:
    spec = workload.pod_spec
    required = _get(spec, AFFINITY)
    path = f"{workload.spec_path}.{'.'.join(AFFINITY)}.nodeSelectorTerms"
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not isinstance(terms, list):
        return [], None
    gpu_expressions = [
        (t, i, expr)
        for t, term in enumerate(terms)
        for i, expr in enumerate((term or {}).get("matchExpressions") or [])
        if isinstance(expr, Mapping) and is_gpu_label(str(expr.get("key", "")))
    ]
    if len(terms) > 1:
        for t, i, expr in gpu_expressions:
            ctx.add(Action.NOT_CONVERTED, f"{path}[{t}].matchExpressions[{i}]", str(expr["key"]),
                    f"node affinity has {len(terms)} nodeSelectorTerms (ORed); moving one term's condition onto "
                    "devices would change its meaning")
        return [], None
    found = []
    for _, i, expr in gpu_expressions:
        values = tuple(str(v) for v in expr.get("values") or [])
        requirement = Requirement(str(expr["key"]), str(expr.get("operator", "")), values)
        found.append(_Found(requirement, f"{path}[0].matchExpressions[{i}]", partial(_drop_expression, terms, expr)))

    def cleanup() -> None:
        term = terms[0]
        if "matchExpressions" in term and not term["matchExpressions"]:
            remove_key(term, "matchExpressions")
        if term:
            return
        node_affinity = _get(spec, AFFINITY[:2])
        remove_key(node_affinity, AFFINITY[2])
        if not node_affinity:
            remove_key(spec["affinity"], "nodeAffinity")
        if not spec["affinity"]:
            remove_key(spec, "affinity")

    return found, cleanup


def _drop_expression(terms: list[Any], expr: Any) -> None:
    expressions = terms[0]["matchExpressions"]
    for index, candidate in enumerate(expressions):
        if candidate is expr:
            del expressions[index]
            return


def _report_preferred(ctx: Context, workload: Workload) -> None:
    preferred = _get(workload.pod_spec, ("affinity", "nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution"))
    for t, term in enumerate(preferred if isinstance(preferred, list) else []):
        expressions = _get(term, ("preference", "matchExpressions")) or []
        for i, expr in enumerate(expressions):
            if isinstance(expr, Mapping) and is_gpu_label(str(expr.get("key", ""))):
                ctx.add(Action.NOT_CONVERTED,
                        f"{workload.spec_path}.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
                        f"[{t}].preference.matchExpressions[{i}]",
                        str(expr["key"]), "a preference, while device selectors are hard requirements; kept")


def plan_placement(ctx: Context, workload: Workload, kinds: list[DeviceKind]) -> PlacementPlan:
    """Translate what can be translated; the plan's apply() edits the pod once the whole document is accepted."""
    plan = PlacementPlan()
    _report_preferred(ctx, workload)
    for collect in (_node_selector, _required_affinity):
        found, cleanup = collect(ctx, workload)
        if cleanup is None:
            continue
        translated_any = False
        for item in found:
            requirement = item.requirement
            vendor = label_vendor(requirement.label)
            targets = [k for k in kinds if k.vendor == vendor]
            if not targets:
                ctx.add(Action.NOT_CONVERTED, item.path, requirement.label,
                        f"the pod has no {vendor} device request to carry it; kept")
                continue
            results = [(kind, translate(requirement, kind)) for kind in targets]
            failed = next((t for _, t in results if t.selector is None), None)
            if failed is not None:
                ctx.add(Action.NOT_CONVERTED, item.path, requirement.label, f"{failed.reason}; kept")
                continue
            for kind, translation in results:
                selectors = plan.selectors.setdefault(kind.resource, [])
                if translation.selector not in selectors:
                    selectors.append(str(translation.selector))
            shown = "; ".join(sorted({str(t.selector) for _, t in results}))
            ctx.add(Action.TRANSLATED, item.path, requirement.label, f"{requirement.operator} {list(requirement.values)} -> {shown}")
            plan.removals.append(item.remove)
            translated_any = True
        if translated_any:
            plan.cleanups.append(cleanup)
    return plan
