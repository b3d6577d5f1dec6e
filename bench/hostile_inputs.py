"""Hostile and large inputs for every command that reads files (tests/ingest and bench/bench_inputs.py).

Each case writes one file (or names a special path) under a directory; `refused`
says whether every command must refuse it with exit 2 and a one-line error.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MIB = 1024 * 1024
CLAIM = (
    "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n  name: c\nspec:\n  devices:\n"
    "    requests:\n    - name: gpu\n      exactly:\n        deviceClassName: gpu.nvidia.com\n"
)


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[Path], Path]  # writes the input under the directory, returns its path
    refused: bool = True  # every command must exit 2 with one line naming the file


def _write(name: str, data: bytes) -> Callable[[Path], Path]:
    def make(directory: Path) -> Path:
        path = directory / name
        path.write_bytes(data)
        return path

    return make


def _special(path: str) -> Callable[[Path], Path]:
    return lambda directory: Path(path)


def _fifo(directory: Path) -> Path:
    path = directory / "fifo.yaml"
    if not path.exists():
        os.mkfifo(path)
    return path  # nobody writes: refused after a bounded wait, never a hang


def _directory(directory: Path) -> Path:
    path = directory / "dir.yaml"
    path.mkdir(exist_ok=True)
    return path


def _unreadable(directory: Path) -> Path:
    path = directory / "unreadable.yaml"
    path.write_text(CLAIM)
    path.chmod(0)
    return path


def _not_a_directory(directory: Path) -> Path:
    parent = directory / "plain-file"
    parent.write_text("x")
    return parent / "claim.yaml"


def _deep_block(levels: int) -> bytes:
    return "".join(f"{' ' * i}k:\n" for i in range(levels)).encode() + b" " * levels + b"v\n"


def _billion_laughs() -> bytes:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 10):
        prev, name = chr(ord("a") + level - 1), chr(ord("a") + level)
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return ("\n".join(lines) + "\n").encode()


def _object(**fields: object) -> bytes:
    doc: dict[str, object] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"}, "spec": {}}
    doc.update(fields)
    return json.dumps(doc).encode()


CASES: tuple[Case, ...] = (
    Case("empty", _write("empty.yaml", b""), refused=False),
    Case("only-comments", _write("comments.yaml", b"# nothing here\n---\n# nor here\n"), refused=False),
    Case("binary", _write("binary.yaml", bytes(range(256)) * 64)),
    Case("invalid-utf8", _write("latin1.yaml", "metadata:\n  name: caf\xe9\n".encode("latin-1"))),
    Case("utf16-bom", _write("utf16.yaml", "\ufeff".encode("utf-16-le") + CLAIM.encode("utf-16-le")), refused=False),
    Case("nul-bytes", _write("nul.yaml", CLAIM.encode() + b"\x00\x00")),
    Case("control-char", _write("control.yaml", b"kind: Resource\x1bClaim\n")),
    Case("dev-zero", _special("/dev/zero")),
    Case("deep-flow-yaml", _write("deep.yaml", b"[" * 50_000 + b"]" * 50_000)),
    Case("deep-flow-json", _write("deep.json", b"[" * 50_000 + b"]" * 50_000)),
    Case("deep-map-json", _write("deepmap.json", b'{"a":' * 50_000 + b"1" + b"}" * 50_000)),
    Case("deep-block", _write("deepblock.yaml", _deep_block(1000))),
    Case("billion-laughs", _write("laughs.yaml", _billion_laughs())),
    Case("huge-scalar", _write("huge.yaml", b"kind: ResourceClaim\nmetadata: {name: c}\nx: " + b"a" * (20 * MIB) + b"\n"), refused=False),
    Case("long-name", _write("longname.json", _object(metadata={"name": "a" * (10 * MIB)}))),
    Case("over-size-limit-name", _write("name50.yaml", b"metadata:\n  name: " + b"a" * (50 * MIB) + b"\n")),
    Case("kind-mapping", _write("kindmap.yaml", b"apiVersion: v1\nkind: {a: 1}\nmetadata: {name: x}\n")),
    Case("kind-list", _write("kindlist.yaml", b"apiVersion: v1\nkind: [Pod]\nmetadata: {name: x}\n")),
    Case("kind-int", _write("kindint.yaml", b"apiVersion: v1\nkind: 42\nmetadata: {name: x}\n")),
    Case("api-version-int", _write("apiint.yaml", b"apiVersion: 1\nkind: Pod\nmetadata: {name: x}\n")),
    Case("api-version-odd", _write("apiodd.yaml", b"apiVersion: a/b/c\nkind: Pod\nmetadata: {name: x}\n")),
    Case("metadata-list", _write("metalist.yaml", b"apiVersion: v1\nkind: Pod\nmetadata: [x]\n")),
    Case("labels-not-strings", _write("labels.yaml", b"apiVersion: v1\nkind: Pod\nmetadata: {name: x, labels: {a: [1]}}\n")),
    Case("multi-doc-one-bad", _write("multi.yaml", CLAIM.encode() + b"---\nkind: Pod\nmetadata: {name: [unclosed\n")),
    Case("tabs", _write("tabs.yaml", b"kind: Pod\nmetadata:\n\tname: x\n")),
    Case("duplicate-keys", _write("dup.yaml", b"kind: Pod\nkind: ResourceClaim\nmetadata: {name: x}\n")),
    Case("scalar-document", _write("scalar.yaml", b"just a string\n")),
    Case("unknown-tag", _write("tag.yaml", b"kind: !!python/object:os.system [ls]\n")),
    Case("recursive-alias", _write("recursive.yaml", b"a: &a [*a]\n")),
    Case("many-values", _write("many.yaml", b"- 1\n" * 1_100_000)),
    Case("directory", _directory),
    Case("missing", lambda directory: directory / "missing.yaml"),
    Case("not-a-directory", _not_a_directory),
    Case("unreadable", _unreadable),
    Case("fifo-without-writer", _fifo),  # refused after reader.FIFO_WAIT_SECONDS
)


def running_as_root() -> bool:
    return os.geteuid() == 0


def is_special(path: Path) -> bool:
    try:
        return not stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False
