"""Helm chart sources are recognised and left alone with "render first"; Jinja text inside a manifest is not Helm."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrate_testlib import run
from shared_corpus import require
from dra_driver.cli.main import main
from dra_driver.migrate import Action
from dra_driver.migrate.helm import is_template_source

TEMPLATE = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "chart.fullname" . }}
spec:
  template:
    spec:
      containers:
      - name: server
        resources:
          {{- toYaml .Values.resources | nindent 10 }}
"""
VALUES = """replicaCount: 1
resources:
  limits:
    nvidia.com/gpu: 1
"""
JINJA_CONFIGMAP = """apiVersion: v1
kind: ConfigMap
metadata:
  name: chat-template
data:
  template.jinja: |
    {{- bos_token }}
---
apiVersion: v1
kind: Pod
metadata:
  name: p
spec:
  containers:
  - name: c
    image: x
    resources:
      limits:
        nvidia.com/gpu: 1
"""


def test_template_source_is_left_alone_with_render_first() -> None:
    result, report = run(TEMPLATE, "templates/deployment.yaml")
    assert result.output == TEMPLATE
    [finding] = report.by_action(Action.NOT_CONVERTED)
    assert "Helm template source" in finding.reason and "helm template" in finding.reason


def test_values_file_is_reported_with_render_first() -> None:
    result, report = run(VALUES, "values.yaml")
    assert result.output == VALUES
    [finding] = report.by_action(Action.NOT_CONVERTED)
    assert finding.subject == "nvidia.com/gpu" and "Helm values file" in finding.reason and "helm template" in finding.reason


def test_jinja_in_a_configmap_is_not_mistaken_for_helm() -> None:
    result, report = run(JINJA_CONFIGMAP)
    assert result.changed and "{{- bos_token }}" in result.output
    assert len(report.by_action(Action.CONVERTED)) == 1


def test_probe_chart_sources_from_the_corpus() -> None:
    probe = require() / "probe"
    for name, reason in (("gpu-operator-templates-operator.yaml", "Helm template source"),
                         ("genaiinfra-tgi-gaudi-values.yaml", "Helm values file")):
        text = (probe / name).read_text()
        result, report = run(text, name)
        assert result.output == text
        assert any(reason in f.reason for f in report.by_action(Action.NOT_CONVERTED)), name


def test_cli_reports_a_template_source_instead_of_refusing_it_as_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "deployment.yaml"
    source.write_text(TEMPLATE)
    assert main(["migrate", str(source)]) == 0  # not "invalid YAML": the input check skips Helm sources
    out, err = capsys.readouterr()
    assert out == TEMPLATE and "render first" in err


ARGO_STEP = """apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  name: train
spec:
  templates:
  - name: wait
    container:
      image: bitnami/kubectl
      command: ["sh", "-c"]
      args: ["kubectl get pods -o go-template='{{range .items}}{{.metadata.name}} {{end}}'"]
  - name: script
    script:
      image: python
      source: |
        print("{{ if .Values.debug }}not helm: block scalar content{{ end }}")
  - name: train
    container:
      image: trainer
      resources:
        limits:
          nvidia.com/gpu: 1
"""


def test_template_syntax_inside_quoted_or_block_strings_is_not_helm() -> None:
    assert not is_template_source(ARGO_STEP)
    assert not is_template_source("a: 'x {{ include \"y\" . }}'\n")
    _, report = run(ARGO_STEP)
    [finding] = report.by_action(Action.NOT_CONVERTED)
    assert finding.subject == "nvidia.com/gpu" and "Argo" in finding.reason and "Helm" not in finding.reason


@pytest.mark.parametrize("text", [
    "metadata:\n  name: {{ .Release.Name }}\n",  # a value
    "spec:\n{{- if .Values.gpu }}\n  x: 1\n{{- end }}\n",  # a line of its own
    "apiVersion: v1\nkind: Pod\nimage: repo/app:{{ .Values.tag }}\n",  # inside a plain scalar of an object
    "env:\n  {{- toYaml .Values.env | nindent 2 }}\n",
])
def test_template_syntax_in_the_yaml_structure_is_helm(text: str) -> None:
    assert is_template_source(text)


ARGO_PLAIN = """apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  generateName: list-
spec:
  templates:
  - name: main
    container:
      image: bitnami/kubectl
      command: [sh, -c]
      args:
      - kubectl get pods -o go-template={{range .items}}{{.metadata.name}}{{end}}
      resources:
        limits:
          nvidia.com/gpu: 1
"""
VALUES_WITH_TPL = """fullnameOverride: app-{{ .Release.Name }}
resources:
  limits:
    nvidia.com/gpu: 1
"""


def test_a_go_template_in_an_argo_shell_argument_is_the_argument_not_helm() -> None:
    assert not is_template_source(ARGO_PLAIN)
    result, report = run(ARGO_PLAIN)
    assert result.output == ARGO_PLAIN
    [finding] = report.by_action(Action.NOT_CONVERTED)
    assert finding.subject == "nvidia.com/gpu" and "Argo" in finding.reason and "Helm" not in finding.reason


def test_a_values_file_holding_helm_actions_for_tpl_is_called_a_values_file() -> None:
    assert not is_template_source(VALUES_WITH_TPL)
    result, report = run(VALUES_WITH_TPL, "values.yaml")
    assert result.output == VALUES_WITH_TPL
    [finding] = report.remaining
    assert "Helm values file" in finding.reason and "template source" not in finding.reason
    assert finding.where.path == "resources.limits" and str(finding.where) == "values.yaml: document 1 resources.limits"


def test_go_template_actions_in_the_yaml_structure_are_a_go_template_source_not_helm() -> None:
    text = "apiVersion: v1\nkind: Pod\nspec:\n{{ if .gpu }}\n  x: 1\n{{ end }}\n  nvidia.com/gpu: 1\n"
    assert is_template_source(text)
    result, report = run(text)
    assert result.output == text
    [finding] = report.remaining
    assert "Go template source" in finding.reason and "Helm" not in finding.reason
