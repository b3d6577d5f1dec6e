"""Helm chart sources: recognised and reported ("render first"), never rewritten.

A template source (`templates/*.yaml` with `{{ .Values... }}`) is not the YAML the
API server sees, and a values file only reaches pods through the templates; the
change a chart needs is to its templates and values, which only the rendered
output (`helm template`) shows completely.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from typing import Any

import yaml

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


_QUOTED_OR_BLOCK = ("'", '"', "|", ">")


def _string_spans(text: str) -> list[tuple[int, int]] | None:
    """(start, end) offsets of the quoted and block scalars of `text`; None when it does not scan as YAML."""
    spans: list[tuple[int, int]] = []
    try:
        for token in yaml.scan(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            if isinstance(token, yaml.ScalarToken) and token.style in _QUOTED_OR_BLOCK:
                spans.append((token.start_mark.index, token.end_mark.index))
    except yaml.YAMLError:
        return None
    return spans


def is_template_source(text: str) -> bool:
    """Go template actions in the YAML structure, not inside a quoted or block string, nor in a comment.

    `{{ .Values.x }}` as a value, a key or a line of its own is Helm; the same characters inside a quoted
    string (a kubectl go-template in an Argo step's shell argument) or a block scalar are the string's content.
    Text that does not even scan as YAML while holding template actions is a template source.
    """
    starts = []
    offset = 0
    for line in text.splitlines(keepends=True):
        if not line.lstrip().startswith("#"):
            starts += [offset + match.start() for match in _HELM_ACTION.finditer(line)]
        offset += len(line)
    if not starts:
        return False
    spans = _string_spans(text)
    if spans is None:
        return True
    begins = [start for start, _ in spans]
    for offset in starts:
        index = bisect.bisect_right(begins, offset) - 1
        if index < 0 or offset >= spans[index][1]:
            return True
    return False


def is_values_like(obj: Mapping[str, Any]) -> bool:
    return "kind" not in obj and "apiVersion" not in obj
