"""Multi-document YAML streams split into documents that keep their exact text.

A document we do not change is written back byte for byte from its original
text; a changed document keeps its original text except for the blocks that
changed (splice.py), which go through ruamel's round-trip dumper with the
indentation style detected from the input. The leading comment block of a
document (Helm's `# Source:` line) is kept verbatim either way.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from dra_driver.errors import FieldError
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


@dataclass
class Stream:
    source: str  # file name or "-"
    documents: list[Document] = field(default_factory=list)


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


def split(text: str, source: str) -> Stream:
    """Split `text` into documents and parse each; raises MigrationError naming the bad document."""
    stream = Stream(source)
    chunks: list[tuple[str, int, list[str]]] = [("", 0, [])]  # (separator, file line of the first line, lines)
    for number, line in enumerate(text.splitlines(keepends=True)):
        if _SEPARATOR.match(line):
            chunks.append((line if line.endswith("\n") else line + "\n", number + 1, []))
        else:
            chunks[-1][2].append(line)
    if chunks[0] == ("", 0, []) and len(chunks) > 1:
        chunks.pop(0)
    loader = _new_yaml()
    errors: list[FieldError] = []
    for index, (separator, first_line, lines) in enumerate(chunks):
        cut = 0
        while cut < len(lines) and (not lines[cut].strip() or lines[cut].lstrip().startswith("#")):
            cut += 1
        document = Document(separator, "".join(lines[:cut]), "".join(lines[cut:]))
        document.indent = detect_indent(document.body)
        try:
            document.data = loader.load(document.body) if document.body.strip() else None
        except YAMLError as exc:
            errors.append(FieldError(f"{source}: document {index}", f"invalid YAML {_yaml_problem(exc, first_line + cut)}"))
        stream.documents.append(document)
    if errors:
        raise MigrationError(errors)
    return stream


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
        elif document.changed:
            spliced = splice(document.body, document.data, _new_yaml(*document.indent))
            body = spliced if spliced is not None else dump(document.data, document.indent)
            parts.append(separator + document.prefix + body)
        else:
            parts.append(separator + document.text)
    return "".join(parts)
