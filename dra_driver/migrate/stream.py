"""Multi-document YAML streams split into documents that keep their exact text.

A document we do not change is written back byte for byte from its original
text; a changed document keeps its original text except for the blocks that
changed (splice.py), which go through ruamel's round-trip dumper with the
indentation style detected from the input. The leading comment block of a
document (Helm's `# Source:` line) is kept verbatim either way.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from dra_driver.common.errors import FieldError
from dra_driver.ingest import InputError, active, build_documents
from dra_driver.migrate.report import MigrationError
from dra_driver.migrate.splice import splice

_SEPARATOR = re.compile(r"^---(?:[ \t].*)?\r?\n?$")
_KEY_ONLY = re.compile(r"^( *)(?:- +)?[^\s#-][^#]*:[ \t]*(?:#.*)?$")


@dataclass
class Document:
    """One document of a stream: separator line, leading comments, body text and parsed data."""

    separator: str  # "---\n" or "" for a first document without one
    prefix: str  # leading blank/comment lines, kept verbatim
    body: str  # the rest of the text
    data: Any = None  # ruamel round-trip data (None for an empty document)
    changed: bool = False
    generated: bool = False  # a document this tool emitted
    indent: tuple[int, int, int] = (2, 2, 0)  # ruamel (mapping, sequence, offset), detected per document

    @property
    def text(self) -> str:
        return self.prefix + self.body

    @property
    def is_json(self) -> bool:
        """Written as JSON (`kubectl get -o json`, a .json manifest): a changed one is written as JSON again."""
        return not self.generated and self.body.lstrip().startswith(("{", "["))


@dataclass
class Stream:
    source: str  # file name or "-"
    documents: list[Document] = field(default_factory=list)
    newline: str = "\n"  # "\r\n" when every line of the input ends so: lines written here end the same way


def _new_yaml(mapping: int = 2, sequence: int = 2, offset: int = 0) -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096  # never fold long strings (CEL expressions, commands)
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    # `[{name: accelerators}]`, not the legal but surprising `[name: accelerators]`, in flow-style resources
    yaml.brace_single_entry_mapping_in_flow_sequence = True
    return yaml


def detect_indent(text: str) -> tuple[int, int, int]:
    """(mapping, sequence, offset) as ruamel wants them, from the first examples in the text.

    Defaults to kubectl's style: two-space mappings, sequences not indented.
    """
    lines = [line.rstrip("\n") for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    mapping = sequence = offset = None
    for current, following in zip(lines, lines[1:]):
        match = _KEY_ONLY.match(current)
        if not match:
            continue
        base = len(current) - len(current.lstrip(" -"))  # column of the key, after any "- "
        indent = len(following) - len(following.lstrip(" "))
        if following.lstrip().startswith("- ") and offset is None and indent >= base:
            offset = indent - base
            after_dash = following.lstrip()[1:]
            sequence = offset + 1 + (len(after_dash) - len(after_dash.lstrip(" ")))
        elif not following.lstrip().startswith("- ") and mapping is None and indent > base:
            mapping = indent - base
        if mapping is not None and offset is not None:
            break
    mapping = mapping or 2
    if offset is None:
        offset, sequence = 0, mapping
    return mapping, max(sequence or mapping, offset + 2), offset


def split(text: str, source: str, only: Callable[[str], bool] | None = None) -> Stream:
    """Split `text` into documents and parse each; raises MigrationError naming the bad document.

    With `only`, a document whose text it refuses is not parsed (its `data` stays None and it is written
    back verbatim) unless the input layer's fast reader finds its YAML broken, and the documents that are
    parsed must fit the round-trip limits together (InputError, with the line of the file): the whole
    input was checked with the ordinary limits.
    """
    pieces = [_piece(separator, first_line, lines) for separator, first_line, lines in _chunks(text)]
    wanted = [only is None or only(document.text) for document, _ in pieces]
    if only is not None:
        broken = [_broken(document.body, source) for document, _ in pieces]
        _check_round_trip_budget(pieces, [parse and not bad for parse, bad in zip(wanted, broken)], source)
        wanted = [parse or bad for parse, bad in zip(wanted, broken)]  # ruamel says what is wrong, with the column
    problems: dict[int, str] = {}  # document index -> what is wrong with its YAML
    loader = _new_yaml()
    for index, ((document, body_line), parse) in enumerate(zip(pieces, wanted)):
        if not parse:
            continue
        document.indent = detect_indent(document.body)
        try:
            document.data = loader.load(document.body) if document.body.strip() else None
        except YAMLError as exc:
            problems[index] = f"invalid YAML {_yaml_problem(exc, body_line)}"
    if problems:
        raise MigrationError([FieldError(f"{source}: document {index + 1}", problems[index]) for index in sorted(problems)])
    return Stream(source, [document for document, _ in pieces], newline=_newline(text))


def _newline(text: str) -> str:
    """"\r\n" when every line break of `text` is one (a Windows file); a file that mixes them keeps its bytes."""
    breaks = text.count("\n")
    return "\r\n" if breaks and text.count("\r\n") == breaks else "\n"


def _chunks(text: str) -> list[tuple[str, int, list[str]]]:
    """(separator line, file line of the separator or 0, the document's lines) per document."""
    chunks: list[tuple[str, int, list[str]]] = [("", 0, [])]
    for number, line in enumerate(text.splitlines(keepends=True)):
        if _SEPARATOR.match(line):
            chunks.append((line if line.endswith("\n") else line + "\n", number + 1, []))
        else:
            chunks[-1][2].append(line)
    if chunks[0] == ("", 0, []) and len(chunks) > 1:
        chunks.pop(0)
    return chunks


def _piece(separator: str, first_line: int, lines: list[str]) -> tuple[Document, int]:
    """The document (leading comments split off) and the number of file lines before its body."""
    cut = 0
    while cut < len(lines) and (not lines[cut].strip() or lines[cut].lstrip().startswith("#")):
        cut += 1
    return Document(separator, "".join(lines[:cut]), "".join(lines[cut:])), first_line + cut


def _broken(body: str, source: str) -> bool:
    """Whether a document's YAML is broken, by the input layer's (fast) reader (ruamel then says where)."""
    try:
        build_documents(body, source, active())
    except InputError:
        return True
    return False


def _check_round_trip_budget(pieces: list[tuple[Document, int]], counted: list[bool], source: str) -> None:
    """The documents to be parsed, counted by the input layer with the round-trip limits (InputError past them).

    The others are blanked line for line, so a refusal names the line of the file.
    """
    kept = "".join(
        document.separator + (document.text if keep else "\n" * document.text.count("\n")) for (document, _), keep in zip(pieces, counted)
    )
    build_documents(kept, source, active().for_round_trip())


def _yaml_problem(exc: YAMLError, body_line: int) -> str:
    """ruamel's problem with the position as a line of the *file* (ruamel counts from the document's body)."""
    context, problem = getattr(exc, "context", None), getattr(exc, "problem", None)
    context_mark = getattr(exc, "context_mark", None)
    mark = getattr(exc, "problem_mark", None) or context_mark
    text = "; ".join(str(part) for part in (context, problem) if part) or str(exc).splitlines()[0]
    if mark is None:
        return f"({text})"
    if context and context_mark is not None and context_mark.line != mark.line:
        text += f" ({context.removeprefix('while ')} began at line {body_line + context_mark.line + 1})"
    return f"at line {body_line + mark.line + 1}, column {mark.column + 1}: {text}"


def dump(data: Any, indent: tuple[int, int, int]) -> str:
    out = io.StringIO()
    _new_yaml(*indent).dump(data, out)
    return out.getvalue()


def _json_indent(body: str) -> int | str | None:
    """The indentation of a JSON document's text: None when it is on one line."""
    for line in body.splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            whitespace = line[: len(line) - len(stripped)]
            return whitespace if "\t" in whitespace else len(whitespace)
    return None


def dump_json(data: Any, body: str) -> str:
    """A JSON document written again as JSON, with the indentation of its original text (ruamel would write YAML)."""
    text = json.dumps(data, indent=_json_indent(body), ensure_ascii=False)
    return text + "\n" if body.endswith("\n") else text


def render(stream: Stream) -> str:
    """The stream's text: unchanged documents verbatim, changed and generated ones dumped."""
    parts: list[str] = []
    for index, document in enumerate(stream.documents):
        separator = document.separator
        if index > 0 and not separator:
            separator = "---\n"
        if parts and not parts[-1].endswith("\n"):
            parts.append("\n")
        if document.generated:
            parts.append(separator + document.prefix + dump(document.data, document.indent))
        elif document.changed and document.is_json:
            parts.append(separator + document.prefix + dump_json(document.data, document.body))
        elif document.changed:
            spliced = splice(document.body, document.data, _new_yaml(*document.indent))
            body = spliced if spliced is not None else dump(document.data, document.indent)
            parts.append(separator + document.prefix + body)
        else:
            parts.append(separator + document.text)
    text = "".join(parts)
    return re.sub(r"(?<!\r)\n", "\r\n", text) if stream.newline == "\r\n" else text
