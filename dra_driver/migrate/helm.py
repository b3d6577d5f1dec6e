"""Helm chart sources: recognised and reported ("render first"), never rewritten.

A template source (`templates/*.yaml` with `{{ .Values... }}`) is not the YAML the
API server sees, and a values file only reaches pods through the templates; the
change a chart needs is to its templates and values, which only the rendered
output (`helm template`) shows completely.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

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


def is_template_source(text: str) -> bool:
    """Go template actions on a line that is not a comment."""
    return any(_HELM_ACTION.search(line) for line in text.splitlines() if not line.lstrip().startswith("#"))


def is_values_like(obj: Mapping[str, Any]) -> bool:
    return "kind" not in obj and "apiVersion" not in obj
