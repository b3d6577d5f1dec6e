"""The input layer on its own: reading with limits, decoding, YAML/JSON building, envelope rules."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_driver.ingest import InputError, Limits, parse_documents, parse_size, read_bytes, read_objects, reader
from dra_driver.ingest.envelope import envelope_errors
from dra_driver.ingest.json_loader import estimated_values

SMALL = Limits(max_bytes=1024, max_depth=5, max_nodes=50)


def values(text: str, limits: Limits = Limits(), as_json: bool = False) -> list[object]:
    return [d.data for d in parse_documents(text.encode(), "in.yaml", as_json=as_json, limits=limits)]


def refusal(text: str | bytes, limits: Limits = Limits(), as_json: bool = False) -> InputError:
    data = text.encode() if isinstance(text, str) else text
    with pytest.raises(InputError) as raised:
        parse_documents(data, "in.yaml", as_json=as_json, limits=limits)
    return raised.value


# -- reading ---------------------------------------------------------------------------------------


def test_an_endless_pipe_stops_at_the_limit(tmp_path: Path) -> None:
    fifo = tmp_path / "endless"
    os.mkfifo(fifo)
    stop = threading.Event()

    def writer() -> None:
        try:
            with open(fifo, "wb") as handle:
                while not stop.is_set():
                    handle.write(b"a" * 4096)
        except BrokenPipeError:
            pass  # the reader gave up, as it should

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        with pytest.raises(InputError, match="larger than the input limit of 1 KiB"):
            read_bytes(fifo, SMALL)
    finally:
        stop.set()
        thread.join(timeout=5)


def test_dev_zero_and_oversized_files_are_refused_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--max-input-size"):
        read_bytes("/dev/zero", SMALL)
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a" * 1025)
    with pytest.raises(InputError, match=r"big.yaml: is larger than the input limit of 1 KiB"):
        read_bytes(big, SMALL)
    big.write_bytes(b"a" * 1024)
    assert len(read_bytes(big, SMALL)) == 1024


def test_standard_input_text_stream_is_limited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("x" * 2000))
    with pytest.raises(InputError, match="standard input: is larger"):
        read_bytes("-", SMALL)
    monkeypatch.setattr("sys.stdin", io.StringIO("kind: Pod\n"))
    assert read_bytes("-", SMALL) == b"kind: Pod\n"


@pytest.mark.parametrize(("make", "words"), [
    (lambda p: p, "is a directory; give a file"),
    (lambda p: p / "nope.yaml", "does not exist"),
])
def test_paths_that_are_not_files(tmp_path: Path, make: object, words: str) -> None:
    with pytest.raises(InputError, match=words):
        read_bytes(make(tmp_path))  # type: ignore[operator]


def test_a_fifo_nobody_writes_to_is_refused_instead_of_hanging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "FIFO_WAIT_SECONDS", 0.05)
    fifo = tmp_path / "quiet"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="named pipe nobody wrote to within 0.05 s"):
        read_bytes(fifo)


def test_a_fifo_whose_writer_comes_later_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "late"
    os.mkfifo(fifo)

    def writer() -> None:
        time.sleep(0.2)  # the reader is already waiting
        with open(fifo, "wb") as handle:
            handle.write(b"kind: Pod\n")

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    assert read_bytes(fifo) == b"kind: Pod\n"
    thread.join(timeout=5)


@pytest.mark.parametrize(("text", "expected"), [("64Mi", 64 << 20), ("100M", 100_000_000), ("512", 512), ("2gi", 2 << 30), ("1KiB", 1024)])
def test_sizes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "-1", "12 parsecs", "0", "1.5Mi"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


# -- decoding --------------------------------------------------------------------------------------


def test_invalid_utf8_names_offset_and_line() -> None:
    error = refusal(b"a: 1\nb: caf\xe9\n")
    assert (error.line, error.offset) == (2, 11) and "byte 0xe9 at offset 11" in str(error)


def test_nul_is_binary_and_control_characters_are_named() -> None:
    assert "binary data (a NUL byte) at offset 6" in str(refusal(b"a: 1\nb\x00"))
    assert "U+0007" in str(refusal(b"a: \x07\n"))


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-8-sig"])
def test_byte_order_marks_are_decoded(codec: str) -> None:
    data = "kind: Pod\nname: ünï\n".encode(codec)
    if codec.startswith(("utf-16", "utf-32")):
        data = "\ufeff".encode(codec) + data
    assert [d.data for d in parse_documents(data, "x")] == [{"kind": "Pod", "name": "ünï"}]


# -- YAML ------------------------------------------------------------------------------------------


def test_lines_are_lines_of_the_file_not_of_the_document() -> None:
    stream = "kind: A\n---\n# comment\nkind: B\n---\nkind: C\nbad: [x\n"
    error = refusal(stream)
    assert error.line == 7 and "document 3" in str(error)
    docs = parse_documents(stream.replace("[x", "[x]").encode(), "in.yaml")
    assert [d.line for d in docs] == [1, 4, 6]  # where each content starts, past "---" and comments


def test_duplicate_keys_are_refused_with_their_line() -> None:
    error = refusal("a: 1\nb:\n  c: 1\n  c: 2\n")
    assert error.line == 4 and "duplicate key 'c'" in str(error)


def test_depth_is_refused_at_the_first_level_too_many() -> None:
    assert values("[" * 5 + "]" * 5, SMALL) == [[[[[[]]]]]]
    assert "nests deeper than 5 levels" in str(refusal("[" * 6 + "]" * 6, SMALL))
    block = "".join(f"{'  ' * i}k:\n" for i in range(6)) + "  " * 6 + "v\n"
    assert refusal(block, SMALL).line == 6


def test_aliases_count_every_value_they_repeat() -> None:
    # a: 1 map + 2 keys... : the anchored list is 4 values; each alias adds 4 more.
    base = "a: &x [1, 2, 3]\n"
    assert values(base + "b: *x\n", Limits(max_nodes=13)) == [{"a": ["1", "2", "3"][:0] or [1, 2, 3], "b": [1, 2, 3]}]
    assert "more than 13 values" in str(refusal(base + "b: *x\nc: *x\n", Limits(max_nodes=13)))


def test_billion_laughs_stops_at_the_value_limit() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(9)]
    error = refusal("\n".join(lines) + "\n")
    assert "more than 250,000 values" in str(error) and error.line is not None and error.line <= 10


def test_merge_keys_and_explicit_keys_win() -> None:
    assert values("base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  y: 3\n") == [{"base": {"x": 1, "y": 2}, "m": {"y": 3, "x": 1}}]


@pytest.mark.parametrize(("text", "words"), [
    ("a: !!python/object:os.system [ls]\n", "is not supported"),
    ("a: !!set {x}\n", "is not supported"),
    ("a: !custom x\n", "is not supported"),
    ("? [a]\n: 1\n", "map key must be a plain value"),
    ("a: *nothing\n", "refers to no anchor"),
    ("a: &r [*r]\n", "refers to no anchor"),
    ("a: !!int x\n", "is not a valid int"),
    ("a: !!bool maybe\n", "is not a valid bool"),  # KeyError inside PyYAML's constructor
    ("a: !!timestamp xx\n", "is not a valid timestamp"),  # AttributeError inside it
    ("a: 2001-13-45\n", "is not a valid timestamp"),  # implicit: safe_load raises ValueError
])
def test_unsafe_or_unsupported_yaml_is_refused(text: str, words: str) -> None:
    assert words in str(refusal(text))


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20),
    st.sampled_from(["yes", "No", "~", "0x1F", "1_000", "1e3", ".inf", "2024-01-01", "=", "<<", "-", "0o17", "+1"]),
)
_data = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=25)


@settings(max_examples=150, derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_data, flow=st.sampled_from([None, True, False]))
def test_same_values_as_yaml_safe_load(data: object, flow: bool | None) -> None:
    text = yaml.safe_dump_all([data, {"second": data}], default_flow_style=flow, allow_unicode=True)
    assert values(text) == list(yaml.safe_load_all(text))


# -- JSON ------------------------------------------------------------------------------------------


def test_json_depth_is_measured_outside_strings() -> None:
    shallow = Limits(max_depth=5)
    deep_string = json.dumps({"a": "[" * 500, "b": '\\"[{'})
    assert values(deep_string, shallow, as_json=True) == [{"a": "[" * 500, "b": '\\"[{'}]
    error = refusal('{"a":' * 6 + "1" + "}" * 6, shallow, as_json=True)
    assert "nests deeper than 5 levels" in str(error)


def test_json_value_estimate_and_errors_with_line_and_column() -> None:
    assert estimated_values(b'{"a": [1, 2], "b": {"c": 3}}') >= 7
    error = refusal(json.dumps(list(range(500))), SMALL, as_json=True)
    assert "more than the 400 this command reads" in str(error) and "--max-input-nodes 63 " in str(error)
    error = refusal('{\n  "a": 1,\n  "b": ]\n}', as_json=True)
    assert error.line == 3 and "is not valid JSON" in str(error) and "column" in str(error)
    assert "is not valid JSON" in str(refusal('{"a": NaN}', as_json=True))  # pydantic-core would accept it


# -- envelope --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("obj", "field", "words"), [
    ({"kind": {"a": 1}}, "kind", "not a map"),
    ({"kind": ["Pod"]}, "kind", "not a list"),
    ({"kind": 7}, "kind", "not a int"),
    ({"kind": "Pod Disruption"}, "kind", "type name"),
    ({"kind": "ResourceClaim\n"}, "kind", "type name"),  # Python's `$` also matches before a final newline
    ({"apiVersion": 1}, "apiVersion", "must be a string"),
    ({"apiVersion": "a/b/c"}, "apiVersion", "GROUP/VERSION"),
    ({"metadata": "x"}, "metadata", "must be a map"),
    ({"kind": "ResourceClaim", "metadata": {"name": "a" * 254}}, "metadata.name", "at most 253"),
    ({"kind": "ResourceClaim", "metadata": {"name": "Upper"}}, "metadata.name", "DNS subdomain"),
    ({"kind": "Role", "metadata": {"name": "a/b"}}, "metadata.name", "'/'"),
    ({"metadata": {"name": 5}}, "metadata.name", "must be a string"),
    ({"metadata": {"namespace": "Not_A_Label"}}, "metadata.namespace", "DNS label"),
    ({"metadata": {"labels": {"app": 1}}}, "metadata.labels['app']", "must be a string"),
    ({"metadata": {"labels": {"bad key!": "x"}}}, "metadata.labels['bad key!']", "name"),
    ({"metadata": {"labels": {"app": "x" * 64}}}, "metadata.labels['app']", "at most 63"),
    ({"metadata": {"labels": {"app": "x\n"}}}, "metadata.labels['app']", "ending alphanumeric"),
    ({"metadata": {"labels": {"app": "x\n\n"}}}, "metadata.labels['app']", "ending alphanumeric"),
    ({"metadata": {"annotations": {"a": "x" * (256 * 1024)}}}, "metadata.annotations", "at most 262,144"),
])
def test_envelope_rules_name_the_field(obj: dict[str, object], field: str, words: str) -> None:
    errors = envelope_errors(obj)
    assert errors and errors[0].path == field and words in errors[0].message


def test_envelope_accepts_ordinary_objects() -> None:
    assert envelope_errors({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "system:controller:x"}}) == []
    assert (
        envelope_errors({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "labels": {"app.kubernetes.io/name": "x"}}})
        == []
    )


def test_read_objects_expands_lists_and_names_the_item(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("kind: List\nitems:\n- {kind: Pod, metadata: {name: a}}\n- {kind: Pod, metadata: {name: B_ad}}\n")
    with pytest.raises(InputError, match=r"list.yaml:1: document 1 items\[1\] metadata.name"):
        read_objects(path)
    path.write_text("kind: List\nitems:\n- {kind: Pod, metadata: {name: a}}\n---\nkind: Node\n")
    assert [(o.obj["kind"], o.line, o.label) for o in read_objects(path)] == [("Pod", 1, "document 1 items[0]"), ("Node", 5, "document 2")]


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


_bracket_text = st.text(alphabet='[]{}"\\ab', max_size=8)
_nested = st.recursive(
    st.one_of(st.integers(), _bracket_text),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_bracket_text, inner, max_size=3),
    max_leaves=30,
)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(value=_nested, limit=st.integers(1, 6))
def test_json_depth_check_agrees_with_the_parsed_value(value: object, limit: int) -> None:
    from dra_driver.ingest.json_loader import _deeper_than

    assert _deeper_than(json.dumps(value).encode(), limit) == (_depth(value) > limit)
