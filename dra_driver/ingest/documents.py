"""From a file name to checked objects: read (size limit), decode, parse (depth, value and alias
limits), then the Kubernetes envelope rules. Each step raises a one-line InputError."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dra_driver.ingest.envelope import envelope_errors
from dra_driver.ingest.errors import InputError
from dra_driver.ingest.field_line import Location, field_line
from dra_driver.ingest.json_loader import load_json
from dra_driver.ingest.limits import Limits, active
from dra_driver.ingest.reader import display_name, read_bytes
from dra_driver.ingest.text import decode, encoding_of
from dra_driver.ingest.yaml_builder import Document, build_documents

if TYPE_CHECKING:  # the type only: reading files needs no pydantic
    from dra_driver.model.api_base import LabelAt

JSON_SUFFIXES = (".json",)


@dataclass
class SourcedObject:
    """A Kubernetes object and where it came from: file, line where its document starts, position."""

    obj: dict[str, Any]
    source: str
    line: int
    label: str  # "document 2" or "document 1 items[3]"
    raw: bytes | str | None = None  # the stream's text (None: not YAML or JSON text we can read again)
    document: int = 0  # 0-based document of the stream
    item: tuple[int, ...] = ()  # List items / list entries that lead from the document to the object

    def field_line(self, loc: Location) -> int:
        """The file line of the field at `loc` (("spec", "devices", "requests", 0, "count")), else the object's line."""
        found = field_line(self.raw, self.document, self.item, loc) if self.raw is not None else None
        return found or self.line

    def located(self, what: str, source: str | None = None) -> str:
        """`file:line: what`, the label of an error about the whole object (`source` in place of its file name)."""
        return f"{source or self.source}:{self.line}: {what}"

    def field_label(self, what: str, source: str | None = None) -> LabelAt:
        """The label of an error about one field (model/api_base.field_errors): `file:line: what` at the field's own line."""
        return lambda loc: f"{source or self.source}:{self.field_line(loc)}: {what}"


def parse_documents(raw: bytes, name: str, *, as_json: bool = False, limits: Limits | None = None) -> list[Document]:
    """The documents of `raw`: one for JSON, every document of a YAML stream."""
    limits = limits or active()
    if encoding_of(raw)[0] not in ("utf-8",):
        raw = decode(raw, name).encode()  # UTF-16/32 with a BOM: parse it as UTF-8
    # Parsing creates many containers that all survive and none cyclic; the cyclic
    # collector would rescan the growing heap for nothing (~2x on large inputs).
    collecting = gc.isenabled()
    gc.disable()
    try:
        if as_json:
            return [Document(load_json(raw, name, limits), 1, raw)]
        decode(raw, name)  # refuse binary and invalid UTF-8 by offset before the parser sees it
        return build_documents(raw, name, limits)
    finally:
        if collecting:
            gc.enable()


def read_documents(source: str | Path, limits: Limits | None = None) -> list[Document]:
    """Every document of the file `source` ('-' for standard input); JSON when it ends in .json."""
    raw = read_bytes(source, limits)
    return parse_documents(raw, display_name(source), as_json=str(source).endswith(JSON_SUFFIXES), limits=limits)


def _expand(data: Any, label: str, path: tuple[int, ...] = ()) -> Iterator[tuple[Any, str, tuple[int, ...]]]:
    """An object, the items of a List (kubectl get -o yaml, discover), or the entries of a bare list."""
    if data is None:
        return
    if isinstance(data, Mapping) and isinstance(data.get("kind"), str) and data["kind"].endswith("List") and isinstance(data.get("items"), list):
        for index, item in enumerate(data["items"]):
            yield from _expand(item, f"{label} items[{index}]", (*path, index))
    elif isinstance(data, list):
        for index, item in enumerate(data):
            yield from _expand(item, f"{label}[{index}]", (*path, index))
    else:
        yield data, label, path


def checked_objects(documents: list[Document], name: str) -> list[SourcedObject]:
    """The objects of `documents` (Lists expanded), each checked against the envelope rules."""
    out: list[SourcedObject] = []
    for number, document in enumerate(documents, start=1):
        for obj, label, item in _expand(document.data, f"document {number}"):
            errors = envelope_errors(obj)
            if errors:
                first = errors[0]
                more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
                field = f" {first.path}" if first.path else ""
                raise InputError.at(name, f"{label}{field}: {first.message}{more}", line=document.line)
            out.append(SourcedObject(dict(obj), name, document.line, label, document.raw, document.index, item))
    return out


def read_objects(source: str | Path, limits: Limits | None = None) -> list[SourcedObject]:
    """Every Kubernetes object in the file `source`, read and checked within `limits`."""
    return checked_objects(read_documents(source, limits), display_name(source))


def read_text(source: str | Path, limits: Limits | None = None) -> str:
    """The text of `source` ('-' for standard input) for a parser of its own (migrate's round trip)."""
    return decode(read_bytes(source, limits), display_name(source))
