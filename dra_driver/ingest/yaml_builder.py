"""YAML documents built from libyaml's event stream, with every limit checked as the data arrives.

PyYAML's composer (C or Python) recurses once per nesting level and builds a
node graph several times the size of the result before constructing anything:
50,000 nested `[` crash the C composer with SIGSEGV, and "- 1" lines cost ~350
bytes each. Here the parser's events (libyaml keeps its own explicit stacks)
become Python objects directly, with an explicit stack, so:

- nesting deeper than the limit stops at the first level too many;
- every value counts against the node limit, an alias as every value it repeats
  (a billion-laughs document stops when its expansion passes the limit);
- duplicate keys are refused as the API server's strict decoding refuses them;
- every error carries the line of the file (marks count from the stream start).

Scalars resolve and construct as yaml.safe_load does (YAML 1.1 core schema,
merge keys); tags other than the standard scalar and collection tags are refused.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

from dra_driver.ingest.errors import InputError
from dra_driver.ingest.limits import Limits

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when PyYAML has it
_RESOLVERS: dict[str | None, list[tuple[str, Any]]] = Resolver.yaml_implicit_resolvers
_CONSTRUCTOR = SafeConstructor()
_TAG = "tag:yaml.org,2002:"
_STR, _NULL, _BOOL, _MERGE, _VALUE = (_TAG + t for t in ("str", "null", "bool", "merge", "value"))
_SCALAR_TAGS = frozenset(_TAG + t for t in ("str", "null", "bool", "int", "float", "timestamp", "binary"))
_MAP_TAGS = frozenset((None, "!", _TAG + "map"))
_SEQ_TAGS = frozenset((None, "!", _TAG + "seq"))
_NO_KEY = object()
_NODE_EVENTS = (ScalarEvent, MappingStartEvent, SequenceStartEvent, AliasEvent)


@dataclass
class Document:
    """One document of a stream and the file line where its content starts."""

    data: Any
    line: int
    # The whole stream's text and this document's position in it, so an error about one field can
    # name that field's line (field_line.py); kept by reference, the text exists anyway.
    raw: bytes | str | None = None
    index: int = 0


@dataclass
class _Frame:
    container: dict[Any, Any] | list[Any]
    anchor: str | None
    line: int
    nodes_before: int  # the stream's node count when this collection started
    key: Any = _NO_KEY
    merges: list[tuple[Any, int]] = field(default_factory=list)


def _resolve(value: str) -> str:
    for tag, regexp in _RESOLVERS.get(value[0] if value else "", []):
        if regexp.match(value):
            return str(tag)
    return _STR


@functools.lru_cache(maxsize=4096)
def _construct(tag: str, value: str) -> Any:
    # Immutable results only (int, float, bool, datetime, bytes), so sharing cached ones is safe.
    return _CONSTRUCTOR.yaml_constructors[tag](_CONSTRUCTOR, ScalarNode(tag, value))


class _Builder:
    def __init__(self, name: str, limits: Limits) -> None:
        self.name = name
        self.limits = limits
        self.nodes = 0
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[Any, int]] = {}
        self.root: Any = None
        self.document = 0  # 1-based number of the document being read

    def fail(self, line: int | None, message: str) -> InputError:
        return InputError.at(self.name, f"document {max(self.document, 1)}: {message}", line=line)

    def count(self, added: int, line: int) -> None:
        self.nodes += added
        if self.nodes > self.limits.max_nodes:
            raise self.fail(
                line,
                f"holds more than {self.limits.max_nodes:,} values (an alias counts every value it repeats), "
                "more than this command reads within its time and memory budget"
                + self.limits.refusal("--max-input-nodes", str(self.limits.max_nodes * 4)),
            )

    def scalar(self, event: ScalarEvent, line: int) -> Any:
        tag, value = event.tag, event.value
        if tag is None or tag == "!":
            tag = _resolve(value) if event.implicit[0] else _STR
        if tag == _STR or tag == _VALUE:  # `=` resolves to the value tag; safe_load reads it as a string
            return value
        if tag == _NULL:
            return None
        if tag == _BOOL and value.lower() in SafeConstructor.bool_values:
            return SafeConstructor.bool_values[value.lower()]
        if tag == _MERGE and self.stack and self.stack[-1].key is _NO_KEY and isinstance(self.stack[-1].container, dict):
            return _MERGE_KEY
        if tag not in _SCALAR_TAGS:
            raise self.fail(line, f"tag {tag!r} is not supported; Kubernetes objects hold only strings, numbers, booleans, null, lists and maps")
        try:
            return _construct(tag, value)
        except Exception as exc:  # an explicit tag on bad text: PyYAML constructors raise any type (KeyError, AttributeError...)
            raise self.fail(line, f"{value[:40]!r} is not a valid {tag.removeprefix(_TAG)}: {exc}") from exc

    def open(self, container: dict[Any, Any] | list[Any], anchor: str | None, line: int) -> None:
        if len(self.stack) >= self.limits.max_depth:
            raise self.fail(
                line,
                f"nests deeper than {self.limits.max_depth} levels; no Kubernetes object needs that many (is the file generated wrongly?)",
            )
        self.count(1, line)
        self.stack.append(_Frame(container, anchor, line, self.nodes - 1))

    def close(self) -> None:
        frame = self.stack.pop()
        if frame.merges:
            self.merge(frame)
        if frame.anchor is not None:
            self.anchors[frame.anchor] = (frame.container, self.nodes - frame.nodes_before)
        self.add(frame.container, frame.line)

    def merge(self, frame: _Frame) -> None:
        target = frame.container
        assert isinstance(target, dict)
        for value, line in frame.merges:
            sources = value if isinstance(value, list) else [value]
            for source in sources:
                if not isinstance(source, dict):
                    raise self.fail(line, "a merge key '<<' takes a map or a list of maps")
                for key, item in source.items():
                    target.setdefault(key, item)

    def add(self, value: Any, line: int) -> None:
        if not self.stack:
            self.root = value
            return
        frame = self.stack[-1]
        container = frame.container
        if isinstance(container, list):
            container.append(value)
        elif frame.key is _NO_KEY:
            if isinstance(value, (dict, list)):
                raise self.fail(line, "a map key must be a plain value (string or number), not a list or map")
            if value is not _MERGE_KEY and value in container:
                raise self.fail(line, f"duplicate key {value!r} in the map starting at line {frame.line}; remove one")
            frame.key = value
        else:
            if frame.key is _MERGE_KEY:
                frame.merges.append((value, line))
            else:
                container[frame.key] = value
            frame.key = _NO_KEY

    def alias(self, anchor: str, line: int) -> None:
        found = self.anchors.get(anchor)
        if found is None:
            raise self.fail(line, f"alias *{anchor} refers to no anchor &{anchor} defined before it (or to the collection it is in)")
        value, size = found
        self.count(size, line)
        self.add(value, line)


class _MergeKey:
    def __repr__(self) -> str:
        return "'<<'"

    def __hash__(self) -> int:
        return hash("<<")


_MERGE_KEY: Any = _MergeKey()


def _events(data: bytes | str) -> Iterator[Any]:
    loader = _LOADER(data)
    try:
        while True:
            event = loader.get_event()
            if event is None:
                return
            yield event
    finally:
        loader.dispose()


def _build(data: bytes | str, builder: _Builder) -> list[Document]:
    # The hot loop: scalars into lists and maps are inlined (method calls per event
    # cost ~40% more); everything rare goes through the builder's methods.
    documents: list[Document] = []
    marker = start = 0  # lines of the document's start (maybe '---') and of its content
    stack = builder.stack
    limit = builder.limits.max_nodes
    for event in _events(data):
        kind = type(event)
        if not stack and not start and kind in _NODE_EVENTS:
            start = _line(event)
        if kind is ScalarEvent:
            builder.nodes += 1
            if builder.nodes > limit:
                builder.count(0, _line(event))
            value = event.value
            if event.tag is None and not event.implicit[0]:
                pass  # quoted or block scalar: a string
            elif event.tag is None and value and value[0] not in _RESOLVERS:
                pass  # plain, and no implicit type starts with this character: a string
            else:
                value = builder.scalar(event, _line(event))
            if event.anchor is not None:
                builder.anchors[event.anchor] = (value, 1)
            frame = stack[-1] if stack else None
            if frame is not None and type(frame.container) is list:
                frame.container.append(value)
            elif frame is not None and frame.key is not _NO_KEY and frame.key is not _MERGE_KEY:
                frame.container[frame.key] = value
                frame.key = _NO_KEY
            else:
                builder.add(value, _line(event))
        elif kind is MappingEndEvent or kind is SequenceEndEvent:
            builder.close()
        elif kind is MappingStartEvent:
            if event.tag not in _MAP_TAGS:
                raise builder.fail(_line(event), f"tag {event.tag!r} on a map is not supported (Kubernetes objects are JSON)")
            builder.open({}, event.anchor, _line(event))
        elif kind is SequenceStartEvent:
            if event.tag not in _SEQ_TAGS:
                raise builder.fail(_line(event), f"tag {event.tag!r} on a list is not supported (Kubernetes objects are JSON)")
            builder.open([], event.anchor, _line(event))
        elif kind is AliasEvent:
            builder.alias(event.anchor, _line(event))
        elif kind is DocumentStartEvent:
            builder.document += 1
            builder.anchors.clear()
            builder.root = None
            marker, start = _line(event), 0
        elif kind is DocumentEndEvent:
            documents.append(Document(builder.root, start or marker, data, len(documents)))
        elif kind is StreamEndEvent:
            break
    return documents


def _line(event: Any) -> int:
    return int(event.start_mark.line) + 1


def _tab_fix(data: bytes | str, line: int | None) -> str:
    """The fix when the line libyaml stopped at (or the one before) holds a tab: YAML indents with spaces only."""
    if line is None:
        return ""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    lines = text.splitlines()
    for number in (line, line - 1):
        if 1 <= number <= len(lines) and "\t" in lines[number - 1]:
            where = "indented with" if lines[number - 1].lstrip(" ").startswith("\t") else "holding"
            return f"; line {number} is {where} a tab: YAML indents with spaces only, replace the tab with spaces"
    return ""


def build_documents(data: bytes | str, name: str, limits: Limits) -> list[Document]:
    """Every document of the YAML stream `data`; InputError (with the file line) on any problem."""
    builder = _Builder(name, limits)
    try:
        return _build(data, builder)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(part for part in (exc.context, exc.problem) if part)
        # libyaml marks the end of the stream one line past a last line without a newline.
        newlines = data.count(b"\n") if isinstance(data, bytes) else data.count("\n")
        last = max(1, newlines + (0 if data[-1:] in (b"\n", "\n") else 1))
        line = min(mark.line + 1, last) if mark else None
        raise builder.fail(line, f"invalid YAML: {problem}{_tab_fix(data, line)}") from exc
    except yaml.YAMLError as exc:  # the reader's encoding errors carry a position, not a mark
        raise builder.fail(None, f"invalid YAML: {exc}") from exc
