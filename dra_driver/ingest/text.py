"""Bytes to text: encodings YAML allows, and binary data refused with its byte offset and line."""

from __future__ import annotations

import codecs
import re

from dra_driver.ingest.errors import InputError

# BOMs YAML 1.2 accepts (5.2); UTF-32 first, its LE BOM starts with UTF-16 LE's.
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
# Characters neither YAML (5.1) nor Kubernetes' JSON accept in a document: C0 controls but
# tab/LF/CR, DEL, C1 controls but NEL, and the non-characters U+FFFE/U+FFFF.
_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ufffe\uffff]")


def line_at(data: bytes, offset: int) -> int:
    """1-based line of byte `offset`."""
    return data.count(b"\n", 0, offset) + 1


def encoding_of(raw: bytes) -> tuple[str, int]:
    """(codec, BOM length) for `raw`: UTF-8 unless a BOM says otherwise."""
    for bom, codec in _BOMS:
        if raw.startswith(bom):
            return codec, len(bom)
    return "utf-8", 0


def decode(raw: bytes, name: str) -> str:
    """The text of `raw` without its BOM; InputError naming the offset of the first bad byte."""
    codec, skip = encoding_of(raw)
    body = raw[skip:]
    try:
        text = body.decode(codec)
    except UnicodeDecodeError as exc:
        offset = skip + exc.start
        label = "binary data, not text" if b"\x00" in body[: exc.start + 64] and codec == "utf-8" else f"not valid {codec.upper()} text"
        line = line_at(raw, offset) if codec == "utf-8" else None
        raise InputError.at(
            name,
            f"is {label}: byte 0x{raw[offset]:02x} at offset {offset} cannot be decoded; save the file as UTF-8 text",
            line=line,
            offset=offset,
        ) from exc
    bad = _FORBIDDEN.search(text)
    if bad:
        offset = skip + len(text[: bad.start()].encode(codec))
        char = bad.group()
        what = "binary data (a NUL byte)" if char == "\x00" else f"the control character U+{ord(char):04X}"
        raise InputError.at(
            name,
            f"holds {what} at offset {offset}; YAML and JSON allow no such characters (is this a text file?)",
            line=text.count("\n", 0, bad.start()) + 1,
            offset=offset,
        )
    return text
