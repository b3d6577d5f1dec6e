"""The one way every command reads a file or standard input (docs/architecture.md, "Input layer").

read_bytes (size limit while reading) -> decode (encodings, binary data by offset)
-> build_documents / load_json (depth, value and alias limits; file line numbers)
-> checked_objects (Kubernetes apiVersion/kind/metadata rules). Every failure is an
InputError that renders as one line `file:line: what is wrong and how to fix it`.
"""

from __future__ import annotations

from dra_driver.inputs.documents import SourcedObject, checked_objects, parse_documents, read_documents, read_objects
from dra_driver.inputs.envelope import envelope_errors
from dra_driver.inputs.errors import InputError
from dra_driver.inputs.limits import Limits, active, configure, parse_size
from dra_driver.inputs.reader import STDIN, display_name, read_bytes
from dra_driver.inputs.text import decode
from dra_driver.inputs.yaml_builder import Document, build_documents

__all__ = [
    "STDIN",
    "Document",
    "InputError",
    "Limits",
    "SourcedObject",
    "active",
    "build_documents",
    "checked_objects",
    "configure",
    "decode",
    "display_name",
    "envelope_errors",
    "parse_documents",
    "parse_size",
    "read_bytes",
    "read_documents",
    "read_objects",
]
