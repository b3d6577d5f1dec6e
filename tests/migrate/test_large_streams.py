"""A rendered chart: migrate parses only the documents that can need it and passes the rest through as text."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.cli.main import main
from migrate_testlib import device_plugin_requests
from dra_driver.migrate import MigrationError, Options, load_catalog, migrate
from dra_driver.migrate.relevance import may_matter

CONFIGMAP = """apiVersion: v1
kind: ConfigMap
metadata:
  name: settings-{i}   # kept: comments too
data:
{data}"""
POD = """apiVersion: v1
kind: Pod
metadata:
  name: trainer-{i}
  annotations:
{annotations}spec:
  containers:
  - name: main
    image: registry.example.com/train:1
    resources:
      limits:
        nvidia.com/gpu: 1
"""


def configmap(i: int, values: int = 20) -> str:
    return CONFIGMAP.format(i=i, data="".join(f"  key{j}: 'value {j}'\n" for j in range(values)))


def pod(i: int, annotations: int = 0) -> str:
    return POD.format(i=i, annotations="".join(f"    note{j}: x\n" for j in range(annotations)) or "    a: b\n")


def test_a_chart_far_past_the_round_trip_limit_migrates_its_gpu_pod_and_keeps_the_rest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    documents = [configmap(i) for i in range(500)] + [pod(0)]  # ~21,000 values, ~3x the round-trip limit
    chart = tmp_path / "chart.yaml"
    chart.write_text("---\n".join(documents))
    assert main(["migrate", "-w", str(chart)]) == 0
    out = chart.read_text().split("---\n")
    assert out[:500] == documents[:500]  # byte for byte
    assert "kind: ResourceClaimTemplate" in "".join(out[500:]) and not device_plugin_requests("".join(out[500:]))
    capsys.readouterr()


def test_the_round_trip_limit_counts_the_parsed_documents_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = "---\n".join([pod(0, annotations=3_000), configmap(1, values=5_000), pod(1, annotations=3_000)])
    chart = tmp_path / "chart.yaml"
    chart.write_text(text)
    assert main(["migrate", str(chart)]) == 2
    err = capsys.readouterr().err
    second_pod = text.splitlines().index("  name: trainer-1") + 1
    line = int(err.split(f"{chart}:")[1].split(":")[0])
    assert second_pod < line < len(text.splitlines()) and "7,500 values" in err and "--max-input-nodes" in err


def test_broken_yaml_in_a_document_migrate_would_not_parse_is_still_refused() -> None:
    with pytest.raises(MigrationError, match=r"f\.yaml: document 2: invalid YAML at line \d+, column \d+"):
        migrate([("f.yaml", configmap(0) + "---\nkind: ConfigMap\ndata: [\n")], Options(catalog=load_catalog()))


@pytest.mark.parametrize(
    "text",
    [
        "metadata:\n  labels:\n    nvidia.com/gpu.product: A100-SXM4-40GB-MIG-1g.5gb\n",  # a MIG single-strategy selector
        "metadata:\n  annotations:\n    amd.com/sharing: on\n",
        "data:\n  config.yaml: |\n    sharing:\n      timeSlicing: {replicas: 4}\n",
        "kind: ResourceClaimTemplate\n",
        "kind: DeviceClass\n",
        'limits: {"habana\\u002eai/gaudi": 1}\n',  # an escape can spell any marker
    ],
)
def test_documents_that_can_matter_are_parsed(text: str) -> None:
    assert may_matter(text)


def test_documents_without_any_marker_are_not() -> None:
    assert not may_matter(configmap(0)) and not may_matter("kind: Service\nspec:\n  ports: [{port: 80}]\n")
