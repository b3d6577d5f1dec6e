"""Helm chart sources are recognised and left alone with "render first"; Jinja text inside a manifest is not Helm."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrate_testlib import pod_manifest, run
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


def test_template_source_line_names_the_file_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "deployment.yaml"
    source.write_text(TEMPLATE.replace("{{- toYaml .Values.resources | nindent 10 }}", "limits:\n            nvidia.com/gpu: 1"))
    assert main(["migrate", str(source)]) == 0
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("not-converted")]
    assert line.split()[1:3] == [f"{source}:", "a"], line  # `not-converted FILE: a Helm template source ...`
    assert line.count(str(source)) == 1, line


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


def _chart(root: Path, values: str = "image: x\ngpus: 1\n", template: str = TEMPLATE) -> Path:
    chart = root / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: demo\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text(values)
    (chart / "templates" / "deployment.yaml").write_text(template)
    return chart


def test_check_on_a_chart_directory_counts_its_requests_as_left(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = _chart(tmp_path, values=VALUES, template=TEMPLATE.replace("{{- toYaml .Values.resources | nindent 10 }}",
                                                                      "limits:\n            nvidia.com/gpu: {{ .Values.gpus }}"))
    assert main(["migrate", "--check", str(chart)]) == 4
    _, err = capsys.readouterr()
    assert "2 device-plugin request(s) left" in err
    assert f"{chart}/templates/deployment.yaml: Helm chart template:" in err and f"{chart}/values.yaml: Helm chart values:" in err
    assert f"helm template RELEASE {chart} | dra-driver migrate -" in err


def test_a_chart_is_never_printed_or_rewritten_as_manifests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = _chart(tmp_path, values=VALUES)
    before = {p: p.read_bytes() for p in chart.rglob("*") if p.is_file()}
    assert main(["migrate", str(chart)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "Helm chart values" in err  # not Chart.yaml and values.yaml as if they were manifests
    assert main(["migrate", "-w", str(chart)]) == 0
    assert {p: p.read_bytes() for p in chart.rglob("*") if p.is_file()} == before


def test_a_chart_without_device_requests_is_said_to_be_unmigrated_and_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = _chart(tmp_path, template="apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ .Release.Name }}\n")
    assert main(["migrate", "--check", str(chart)]) == 0
    _, err = capsys.readouterr()
    assert f"{chart}: Helm chart: not migrated" in err and "0 device-plugin request(s) left" in err


def test_a_chart_link_to_a_hostile_file_is_not_followed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = _chart(tmp_path, template="apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n")
    (chart / "templates" / "zero.yaml").symlink_to("/dev/zero")
    (chart / "templates" / "elsewhere.yaml").symlink_to(tmp_path / "outside.yaml")
    (tmp_path / "outside.yaml").write_text(pod_manifest("p", "nvidia.com/gpu"))
    assert main(["migrate", "--check", str(chart)]) == 0
    assert "Helm chart: not migrated" in capsys.readouterr().err
