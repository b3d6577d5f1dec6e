"""Reading fleet files: both parsers give the same objects, errors name the file, the collector comes back."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
import yaml

from dra_driver.sources import fleet as fleets
from dra_driver.ingest import InputError

SLICE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "node-a-gpu"},
    "spec": {
        "driver": "gpu.example.com",
        "nodeName": "node-a",
        "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "gpu-0", "attributes": {"index": {"int": 12345678901234567890}, "model": {"string": "ünïcode"}}}],
    },
}
LIST = {"apiVersion": "v1", "kind": "List", "items": [SLICE, {**SLICE, "kind": "DeviceClass", "metadata": {"name": "c"}, "spec": {}}]}


def test_json_and_yaml_files_read_the_same_objects(tmp_path: Path) -> None:
    as_json, as_yaml = tmp_path / "fleet.json", tmp_path / "fleet.yaml"
    as_json.write_text(json.dumps(LIST))
    as_yaml.write_text(yaml.safe_dump(LIST, allow_unicode=True))
    expected = LIST["items"]
    assert fleets.read_documents(as_json) == expected
    assert fleets.read_documents(as_yaml) == expected


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("bad.json", b'{"kind": "List", "items": [', r"bad.json:1: is not valid JSON"),
        ("bad.yaml", b"kind: [unclosed\n", r"bad.yaml:1: document 1: invalid YAML"),
        # not UTF-8: an error with the byte offset, not a traceback
        ("latin1.json", b'{"kind": "\xe9"}', r"latin1.json:1: is not valid UTF-8 text: byte 0xe9 at offset 10"),
        ("latin1.yaml", b"kind: \xe9\n", r"latin1.yaml:1: is not valid UTF-8 text: byte 0xe9 at offset 6"),
    ],
)
def test_unreadable_content_is_a_fleet_error_naming_the_file(tmp_path: Path, name: str, content: bytes, words: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputError, match=words) as raised:
        fleets.read_documents(path)
    assert str(path) in str(raised.value)


def test_the_collector_is_restored_after_parsing_and_after_a_failure(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(LIST))
    bad.write_text("{")
    assert gc.isenabled()
    fleets.read_documents(good)
    assert gc.isenabled()
    with pytest.raises(InputError):
        fleets.read_documents(bad)
    assert gc.isenabled()
    gc.disable()  # a caller that runs with the collector off keeps it off
    try:
        fleets.read_documents(good)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_load_paths_restores_the_collector_after_a_fleet_and_after_a_refused_object(tmp_path: Path) -> None:
    good, foreign = tmp_path / "good.json", tmp_path / "foreign.json"
    good.write_text(json.dumps(LIST))
    foreign.write_text(json.dumps({**SLICE, "kind": "ConfigMap"}))  # refused after parsing, while sorting
    assert gc.isenabled()
    assert [s["metadata"]["name"] for s in fleets.load_paths([good]).slices] == ["node-a-gpu"]
    assert gc.isenabled()
    with pytest.raises(fleets.FleetError, match="ConfigMap"):
        fleets.load_paths([good, foreign])
    assert gc.isenabled()
