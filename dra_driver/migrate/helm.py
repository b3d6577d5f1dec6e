"""Helm charts and template sources: recognised and reported ("render first"), never rewritten.

A template source (`templates/*.yaml` with `{{ .Values... }}`) is not the YAML the
API server sees, and a values file only reaches pods through the templates; the
change a chart needs is to its templates and values, which only the rendered
output (`helm template`) shows completely. A chart directory is reported file by
file; Go template text that is not Helm's (a kubectl go-template in an Argo step)
is a string's content, not a template source.
"""

from __future__ import annotations

import bisect
import os
import re
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from dra_driver.ingest import InputError
from dra_driver.migrate.report import Action, Location, Report
from dra_driver.migrate.resources import mentions_resource

# Go-template actions Helm charts use; a `{{ name }}` Jinja string inside a ConfigMap value does not match.
_HELM_ACTION = re.compile(
    r"\{\{-?\s*(?:\.Values|\.Release|\.Chart|\.Capabilities|\$\.|include\b|template\b|if\b|else\b|end\b|range\b|"
    r"with\b|toYaml\b|define\b|tpl\b|required\b|default\b)"
)
RENDER_FIRST = "render first (`helm template RELEASE CHART | dra-driver migrate -`) and migrate the rendered output"
TEMPLATE_REASON = f"a Helm template source (Go template actions such as {{{{ .Values }}}}), not a manifest; {RENDER_FIRST}"
VALUES_REASON = (
    "no apiVersion or kind: a Helm values file (or another tool's input); its device requests reach pods only "
    f"through the chart's templates; {RENDER_FIRST}, then carry the change into the chart"
)


# Inside an action, what only Helm has: its built-in objects and its template functions. `{{range .items}}` (a
# kubectl go-template) or `{{ if ... }}` alone is Go template text that many tools use.
_HELM_ONLY = re.compile(
    r"\.(?:Values|Release|Chart|Capabilities|Files|Template)\b|\b(?:include|toYaml|tpl|required|define|nindent|lookup)\b"
)
_ACTION_SPAN = 1000  # characters of an action read for Helm's names
GO_TEMPLATE_REASON = (
    "a Go template source (template actions such as {{ range }} or {{ if }} in the YAML structure), not a manifest; "
    "render it with the tool that owns it and migrate the output"
)
_QUOTED_OR_BLOCK = ("'", '"', "|", ">")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _scalar_spans(text: str) -> list[tuple[int, int, bool]] | None:
    """(start, end, plain) of every scalar of `text`, in order; None when it does not scan as YAML."""
    spans: list[tuple[int, int, bool]] = []
    try:
        for token in yaml.scan(text, Loader=_LOADER):
            if isinstance(token, yaml.ScalarToken):
                spans.append((token.start_mark.index, token.end_mark.index, token.style not in _QUOTED_OR_BLOCK))
    except yaml.YAMLError:
        return None
    return spans


def _actions(text: str) -> list[tuple[int, bool]]:
    """(offset, Helm-only) of every template action of `text` outside comment lines.

    Helm's names are searched once per line and located by bisection, so that a line of many actions costs
    n log n rather than a search per action.
    """
    found = []
    offset = 0
    for line in text.splitlines(keepends=True):
        if not line.lstrip().startswith("#"):
            starts = [match.start() for match in _HELM_ACTION.finditer(line)]
            closes = [match.start() for match in re.finditer(r"\}\}", line)] if starts else []
            helm_at = [match.start() for match in _HELM_ONLY.finditer(line)] if starts else []
            for start in starts:
                close = bisect.bisect_left(closes, start)
                end = min(closes[close] if close < len(closes) else len(line), start + _ACTION_SPAN)
                first = bisect.bisect_left(helm_at, start)
                found.append((offset + start, first < len(helm_at) and helm_at[first] < end))
        offset += len(line)
    return found


def _is_values_file(text: str) -> bool:
    """YAML whose documents are all maps without apiVersion and kind: a values file (actions in it are for `tpl`)."""
    try:
        documents = list(yaml.load_all(text, Loader=_LOADER))
    except (yaml.YAMLError, RecursionError):  # not yet checked by the input layer: nesting may be hostile
        return False
    maps = [d for d in documents if d is not None]
    return bool(maps) and all(isinstance(d, Mapping) and is_values_like(d) for d in maps)


def template_reason(text: str) -> str | None:
    """Why `text` is a template source rather than a manifest; None when it is YAML to migrate.

    Helm: Helm's objects or functions (`{{ .Values.x }}`, `{{- include ... }}`) in the YAML structure (a value, a
    key, a line of its own) or in a plain scalar (`image: repo:{{ .Values.tag }}`). Other Go template actions count
    only in the structure: inside any string they are that string's content (a kubectl go-template in an Argo step's
    shell argument). Inside quoted or block strings nothing counts. A values file (no apiVersion or kind anywhere,
    `{{ .Release.Name }}` in its values for the chart's `tpl`) is not a template: it is reported as a values file.
    Text that does not even scan as YAML while holding template actions is a template source.
    """
    actions = _actions(text)
    if not actions:
        return None
    spans = _scalar_spans(text)
    if spans is None:
        return TEMPLATE_REASON if any(helm for _, helm in actions) else GO_TEMPLATE_REASON
    begins = [start for start, _, _ in spans]
    reason = None
    for offset, helm in actions:
        index = bisect.bisect_right(begins, offset) - 1
        inside = index >= 0 and offset < spans[index][1]
        if inside and not (spans[index][2] and helm):
            continue  # string content: quoted or block text, or a plain scalar's non-Helm action
        if helm:
            reason = TEMPLATE_REASON
            break
        reason = GO_TEMPLATE_REASON
    if reason == TEMPLATE_REASON and _is_values_file(text):
        return None
    return reason


def is_template_source(text: str) -> bool:
    """Helm or other Go template source, not a manifest (template_reason)."""
    return template_reason(text) is not None


def is_values_like(obj: Mapping[str, Any]) -> bool:
    return "kind" not in obj and "apiVersion" not in obj


CHART_FILE = "Chart.yaml"
_CHART_SOURCES = (".yaml", ".yml", ".tpl", ".json")
MAX_CHART_FILES = 5000  # a chart far larger than any real one is refused rather than walked on


def is_chart(directory: Path) -> bool:
    """A Helm chart directory: it has a Chart.yaml (what `helm template DIR` needs)."""
    return (directory / CHART_FILE).is_file()


def _chart_sources(directory: Path) -> list[Path]:
    """The chart's template and values files (subcharts included), regular files only, never through a link."""
    found: list[Path] = []
    for root, folders, files in os.walk(directory, followlinks=False):
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        for name in sorted(files):
            path = Path(root) / name
            if name == CHART_FILE or path.suffix not in _CHART_SOURCES:
                continue
            try:
                regular = stat.S_ISREG(os.lstat(path).st_mode)
            except OSError:  # gone since the listing
                continue
            if not regular:
                continue
            found.append(path)
            if len(found) > MAX_CHART_FILES:
                raise InputError.at(str(directory), f"a Helm chart with more than {MAX_CHART_FILES} template and values "
                                 "files; render it (helm template) and migrate the output")
    return found


def chart_report(directory: Path, read: Callable[[Path], str]) -> Report:
    """A Helm chart is never rewritten: each of its files naming a device-plugin resource is a request left.

    Its templates are not manifests and its values reach pods only through them, so the requests are
    counted as left (a CI gate must not pass) with what to do: render, migrate the output, carry it back.
    """
    report = Report()
    render = (f"render the chart (`helm template RELEASE {directory} | dra-driver migrate -`), migrate the output, "
              "then carry the change into the chart's templates and values")
    named = 0
    for path in _chart_sources(directory):
        if mentions_resource(read(path)):
            named += 1
            part = "template" if "templates" in path.relative_to(directory).parts else "values"
            report.add(Action.NOT_CONVERTED, Location(str(path), None), f"Helm chart {part}",
                       f"names device-plugin resources, and a chart is never rewritten: {render}", remains=True)
    if not named:
        report.add(Action.NOT_CONVERTED, Location(str(directory), None), "Helm chart",
                   f"not migrated (a chart is never rewritten), and none of its templates or values names a "
                   f"device-plugin resource; to check the rendered manifests, {render}")
    return report
