"""Property-based: mutated and generated YAML/JSON documents never crash a command.

Seeds are valid inputs of each command (a claim, a fleet, manifests, a hardware
profile); hypothesis replaces subtrees with odd values, or edits the text with
YAML-significant snippets. Every run must end with exit 0, 1 or 2 and no
traceback or internal error. Fixed profile (derandomized, no database) so CI
sees the same examples every time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.hostile_inputs import CLAIM
from input_commands import COMMANDS, FLEET, assert_survived, run_in_process, write_companions

ROOT = Path(__file__).parents[2]
SEEDS: dict[str, tuple[str, str]] = {  # command -> (file suffix, seed text)
    "explain-claim": (".yaml", CLAIM),
    "explain-fleet": (".json", json.dumps(FLEET)),
    "migrate": (".yaml", (ROOT / "tests/migrate/corpus/anchors.yaml").read_text() + "---\n" + (ROOT / "tests/migrate/corpus/mig.yaml").read_text()),
    "discover-profile": (".yaml", (ROOT / "vendors/nvidia/profiles/t4.yaml").read_text()),
    "fleet-fleet": (".yaml", yaml.safe_dump(FLEET)),
}
PROFILE = settings(
    max_examples=20, derandomize=True, database=None, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)

_odd_strings = st.sampled_from([
    "", " ", "-", "~", "null", "yes", "0x10", "1e400", "NaN", "ResourceClaim", "Pod", "v1", "a/b/c", "gpu.nvidia.com",
    "UPPER", "x" * 300, "ünï", "\t", "a: b", "[", "{", "*a", "&a", "!!str", "\\", "'", '"', "#", "---", "\u2028",
])
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), _odd_strings, st.text(max_size=12),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.one_of(_odd_strings, st.text(max_size=8)), inner, max_size=4),
    max_leaves=12,
)
_snippets = st.sampled_from([
    "\n", ": ", "- ", "[", "]", "{", "}", ",", "&a ", "*a", "<<: *a\n", "!!binary ", "? ", "|\n", ">-\n", "\t", "#",
    "'", '"', "\\u0000", "---\n", "...\n", "%YAML 1.1\n", "\x00", "\xff", "\ufeff", "kind: {a: 1}\n", "metadata: [x]\n",
    "!!bool ", "!!timestamp ", "!!int ", "!!float ", "2001-13-45", "!!set ", "!custom ",
])


def _mutate(data: Any, draw: Any, depth: int = 0) -> Any:
    """`data` with one subtree replaced, removed or given an extra odd entry."""
    if isinstance(data, (dict, list)) and data and depth < 8 and draw(st.booleans()):
        keys = list(data) if isinstance(data, dict) else list(range(len(data)))
        key = draw(st.sampled_from(keys))
        copy = dict(data) if isinstance(data, dict) else list(data)
        copy[key] = _mutate(data[key], draw, depth + 1)
        return copy
    action = draw(st.sampled_from(["replace", "remove", "add"]))
    if action == "remove" and isinstance(data, (dict, list)) and data:
        copy = dict(data) if isinstance(data, dict) else list(data)
        del copy[draw(st.sampled_from(list(copy) if isinstance(copy, dict) else list(range(len(copy)))))]
        return copy
    if action == "add" and isinstance(data, dict):
        return {**data, draw(st.one_of(_odd_strings, st.sampled_from(["kind", "metadata", "name", "spec", "items", "apiVersion"]))): draw(_values)}
    if action == "add" and isinstance(data, list):
        return [*data, draw(_values)]
    return draw(_values)


def _run(tmp_path: Path, command: str, suffix: str, content: bytes) -> None:
    path = tmp_path / f"input{suffix}"
    path.write_bytes(content)
    claim, fleet = write_companions(tmp_path)
    assert_survived(run_in_process(COMMANDS[command](path, claim, fleet)))


@pytest.mark.parametrize("command", sorted(COMMANDS))
@PROFILE
@given(data=st.data())
def test_mutated_documents(tmp_path: Path, command: str, data: st.DataObject) -> None:
    suffix, seed = SEEDS[command]
    documents = list(yaml.safe_load_all(seed))
    index = data.draw(st.integers(0, len(documents) - 1))
    documents[index] = _mutate(documents[index], data.draw)
    if suffix == ".json":
        content = json.dumps(documents[0], allow_nan=True).encode()
    else:
        content = yaml.safe_dump_all(documents, allow_unicode=True, default_flow_style=data.draw(st.sampled_from([None, True, False]))).encode()
    _run(tmp_path, command, suffix, content)


@pytest.mark.parametrize("command", sorted(COMMANDS))
@PROFILE
@given(data=st.data())
def test_edited_text(tmp_path: Path, command: str, data: st.DataObject) -> None:
    suffix, seed = SEEDS[command]
    text = seed
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        edit = data.draw(st.sampled_from(["insert", "delete", "repeat"]))
        if edit == "insert":
            text = text[:at] + data.draw(_snippets) + text[at:]
        elif edit == "delete":
            text = text[:at] + text[at + data.draw(st.integers(1, 40)):]
        else:
            text = text[:at] + text[at:at + 30] * data.draw(st.integers(2, 6)) + text[at:]
    _run(tmp_path, command, suffix, text.encode("utf-8", "surrogatepass"))
