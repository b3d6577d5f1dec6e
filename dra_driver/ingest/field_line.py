"""The file line of one field of an object already read: for errors about that field.

The builder (yaml_builder.py) keeps only each document's first line, to stay fast on
fleets of thousands of devices. When an error names a field, the document is composed
again (PyYAML's node tree carries marks) and the path is followed to the field's key.
Only on errors, on text that already passed the input limits: nesting is bounded, and
aliases stay single nodes in a node tree, so nothing is expanded.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from typing import Any

import yaml

Location = Sequence[str | int]  # ("spec", "devices", "requests", 0, "count"): keys and list indexes

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _child(node: yaml.Node, part: str | int) -> tuple[yaml.Node, yaml.Node] | None:
    """(the node that names `part`: a key or the list entry, the value) in `node`, or None."""
    if isinstance(part, int) and isinstance(node, yaml.SequenceNode):
        return (node.value[part], node.value[part]) if 0 <= part < len(node.value) else None
    if isinstance(part, str) and isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == part:
                return key, value
    return None


def field_line(raw: bytes | str, document: int, item: Sequence[int], loc: Location) -> int | None:
    """The 1-based line of the field `loc` of the object at `item` of the stream's `document`, or None when not found."""
    try:
        node = next(islice(yaml.compose_all(raw, Loader=_LOADER), document, None), None)
    except yaml.YAMLError:
        return None
    for index in item:  # a List's items, or a bare list's entries
        if node is None:
            return None
        found = _child(node, "items") if isinstance(node, yaml.MappingNode) else (node, node)
        node = found[1] if found else None
        found = _child(node, index) if node is not None else None
        node = found[1] if found else None
    marker: yaml.Node | None = None
    for part in loc:
        found = _child(node, part) if node is not None else None
        if found is None:
            break
        marker, node = found
    return int(marker.start_mark.line) + 1 if marker is not None else None
