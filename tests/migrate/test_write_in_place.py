"""`migrate -w` rewrites a manifest atomically: its mode is kept and no temp file is left beside it."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from dra_driver.cli.main import main
from migrate_testlib import device_plugin_requests

POD = """apiVersion: v1
kind: Pod
metadata:
  name: trainer
spec:
  containers:
  - name: main
    image: registry.example.com/train:1
    resources:
      limits:
        nvidia.com/gpu: 1
"""


@pytest.mark.parametrize("mode", [0o640, 0o604])
def test_rewritten_file_keeps_its_mode_and_leaves_no_temp_file(tmp_path: Path, mode: int, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD)
    manifest.chmod(mode)
    assert main(["migrate", "-w", str(manifest)]) == 0
    text = manifest.read_text()
    assert not device_plugin_requests(text) and "kind: ResourceClaimTemplate" in text
    assert stat.S_IMODE(manifest.stat().st_mode) == mode
    assert [p.name for p in tmp_path.iterdir()] == ["pod.yaml"]
    capsys.readouterr()


POD_JSON = json.dumps(yaml.safe_load(POD), indent=4) + "\n"


def test_a_json_manifest_rewritten_in_place_stays_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pod.json"
    path.write_text(POD_JSON)
    assert main(["migrate", "-w", str(path)]) == 0
    text = path.read_text()
    written = json.loads(text)  # one JSON value: a List holding the template and the pod, not YAML documents
    assert written["kind"] == "List" and [i["kind"] for i in written["items"]] == ["ResourceClaimTemplate", "Pod"]
    pod = written["items"][1]
    assert pod["spec"]["containers"][0]["resources"] == {"claims": [{"name": "accelerators"}]}
    assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == written["items"][0]["metadata"]["name"]
    assert '\n    "kind": "List",\n' in text  # the file's own four-space indentation
    assert main(["migrate", "--check", str(path)]) == 0  # idempotent
    capsys.readouterr()


def test_a_one_line_json_list_stays_one_line_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "list.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [yaml.safe_load(POD)]}))
    assert main(["migrate", "-w", str(path)]) == 0
    text = path.read_text()
    assert "\n" not in text and [i["kind"] for i in json.loads(text)["items"]] == ["ResourceClaimTemplate", "Pod"]
    assert not device_plugin_requests(text)
    capsys.readouterr()


def test_a_json_manifest_with_extended_resource_classes_stays_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pod.json"
    path.write_text(POD_JSON.replace("nvidia.com/gpu", "nvidia.com/mig-1g.10gb"))
    assert main(["migrate", "--strategy", "extended-resource", "-w", str(path)]) == 0
    written = json.loads(path.read_text())
    assert [i["kind"] for i in written["items"]] == ["Pod", "DeviceClass"]
    capsys.readouterr()


def test_a_crlf_file_keeps_crlf_in_every_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pod.yaml"
    service = "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n"
    path.write_bytes((service + "---\n" + POD).replace("\n", "\r\n").encode())
    assert main(["migrate", "-w", str(path)]) == 0
    data = path.read_bytes()
    assert data.count(b"\n") == data.count(b"\r\n") > POD.count("\n") + service.count("\n")
    assert data.startswith(service.replace("\n", "\r\n").encode())  # the unchanged document byte for byte
    assert not device_plugin_requests(data.decode())
    capsys.readouterr()


def test_a_file_mixing_line_endings_keeps_its_unchanged_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pod.yaml"
    mixed = "apiVersion: v1\r\nkind: Service\r\nmetadata:\r\n  name: s\n---\n" + POD
    path.write_text(mixed, newline="")
    assert main(["migrate", "-w", str(path)]) == 0
    assert path.read_bytes().startswith(mixed.split("---")[0].encode())
    capsys.readouterr()
