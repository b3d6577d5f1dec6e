"""The one way every command reads a file or standard input (docs/architecture.md, "Input layer").

read_bytes (size limit while reading) -> decode (encodings, binary data by offset)
-> build_documents / load_json (depth, value and alias limits; file line numbers)
-> checked_objects (Kubernetes apiVersion/kind/metadata rules). Every failure is an
InputError that renders as one line `file:line: what is wrong and how to fix it`.

Names are imported on first use: the CLI's entry point needs only the limits and
the error type, not PyYAML and pydantic-core, before it knows the command.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "InputError": "errors",
    "Limits": "limits",
    "active": "limits",
    "configure": "limits",
    "parse_size": "limits",
    "STDIN": "reader",
    "display_name": "reader",
    "read_bytes": "reader",
    "decode": "text",
    "Document": "yaml_builder",
    "build_documents": "yaml_builder",
    "envelope_errors": "envelope",
    "SourcedObject": "documents",
    "checked_objects": "documents",
    "parse_documents": "documents",
    "read_documents": "documents",
    "read_objects": "documents",
    "read_text": "documents",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
