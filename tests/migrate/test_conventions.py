"""Promises of the command as a whole: document numbers, --check exit codes, the summary, directories, generateName."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from migrate_testlib import base_name, by_kind, cli as _main, pod_manifest, run
from dra_driver.migrate import Action

CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  a: b\n"


def test_findings_and_refusals_number_documents_from_one_like_the_input_layer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(CONFIGMAP + "---\n" + pod_manifest("p", "nvidia.com/gpu"))
    code, _, err = _main([str(good), "--report", "json"], capsys)
    assert code == 0
    findings = json.loads(err)["findings"]
    assert {f["document"] for f in findings} == {2}
    # the input layer refuses the same second document as "document 2"
    bad = tmp_path / "bad.yaml"
    bad.write_text(CONFIGMAP + "---\napiVersion: v1\nkind: {a: b}\n")
    code, _, err = _main([str(bad)], capsys)
    assert code == 2 and "document 2" in err
    # and so does migrate's own YAML check of a document it parses
    worse = tmp_path / "worse.yaml"
    worse.write_text(CONFIGMAP + "---\n" + pod_manifest("p", "nvidia.com/gpu") + "   oops: [\n")
    code, _, err = _main([str(worse)], capsys)
    assert code == 2 and "document 2" in err


def test_check_fails_with_its_own_code_while_requests_remain_unconverted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shared = tmp_path / "shared.yaml"
    shared.write_text(pod_manifest("p", "nvidia.com/gpu.shared"))
    code, _, err = _main(["--check", str(shared)], capsys)
    assert code == 4 and "1 device-plugin request(s) left unconverted" in err
    code, _, err = _main(["--check", "--report", "json", str(shared)], capsys)
    report = json.loads(err)
    assert code == 4 and report["summary"]["remaining"] == 1
    assert [f["remains"] for f in report["findings"]] == [True]
    # something to change wins: run -w first, then what is left
    both = tmp_path / "both.yaml"
    both.write_text(shared.read_text() + "---\n" + pod_manifest("q", "nvidia.com/gpu"))
    assert _main(["--check", str(both)], capsys)[0] == 1
    assert _main(["-w", str(both)], capsys)[0] == 0
    assert _main(["--check", str(both)], capsys)[0] == 4
    done = tmp_path / "done.yaml"
    done.write_text(CONFIGMAP)
    assert _main(["--check", str(done)], capsys)[0] == 0


def test_a_helm_template_with_gpu_requests_counts_as_unconverted_but_one_without_does_not(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gpu = tmp_path / "deployment.yaml"
    gpu.write_text(pod_manifest("{{ .Release.Name }}", "nvidia.com/gpu"))
    assert _main(["--check", str(gpu)], capsys)[0] == 4
    service = tmp_path / "service.yaml"
    service.write_text("apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ .Release.Name }}\n")
    assert _main(["--check", str(service)], capsys)[0] == 0


def test_the_summary_after_write_says_what_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "p.yaml"
    manifest.write_text(pod_manifest("p", "amd.com/gpu"))
    assert "1 file(s) would change" in _main(["--check", str(manifest)], capsys)[2]
    err = _main(["-w", str(manifest)], capsys)[2]
    assert "1 file(s) changed" in err and "would change" not in err


def test_a_plain_directory_is_migrated_file_by_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.yaml").write_text(pod_manifest("a", "nvidia.com/gpu"))
    (tmp_path / "b.yml").write_text(pod_manifest("a", "habana.ai/gaudi"))  # same name: files are independent
    (tmp_path / "notes.txt").write_text("nvidia.com/gpu: 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.yaml").write_text(pod_manifest("c", "nvidia.com/gpu"))
    code, out, _ = _main([str(tmp_path)], capsys)
    assert code == 0
    assert sorted(base_name(t["metadata"]["name"]) for t in by_kind(out, "ResourceClaimTemplate")) == ["a-accelerators"] * 2
    assert _main(["-w", str(tmp_path)], capsys)[0] == 0
    assert "ResourceClaimTemplate" in (tmp_path / "a.yaml").read_text()
    assert "ResourceClaimTemplate" in (tmp_path / "b.yml").read_text()
    assert (tmp_path / "notes.txt").read_text() == "nvidia.com/gpu: 1\n"  # not a manifest
    assert "ResourceClaimTemplate" not in (tmp_path / "sub" / "c.yaml").read_text()  # like kubectl apply -f DIR


def test_an_empty_directory_is_refused_with_what_it_lacks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main([str(tmp_path)], capsys)
    assert code == 2 and "no kustomization" in err


def test_a_workload_with_generate_name_gets_a_template_named_after_it() -> None:
    text = pod_manifest("x", "nvidia.com/gpu").replace("  name: x\n", "  generateName: train-\n")
    result, report = run(text)
    [template] = by_kind(result.output, "ResourceClaimTemplate")
    assert base_name(template["metadata"]["name"]) == "train-accelerators"
    [pod] = by_kind(result.output, "Pod")
    assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == template["metadata"]["name"]
    assert {f.where.obj for f in report.findings} == {"Pod/train-*"}
    assert any(f.where.path == "metadata.generateName" for f in report.by_action(Action.NOTE))
