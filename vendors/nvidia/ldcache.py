"""Reading (and, for simulated driver roots, writing) glibc's binary ld.so.cache.

The NVIDIA driver's libraries are found the way nvidia-container-toolkit finds
them: through the driver root's linker cache first. Two layouts exist (glibc
elf/cache.c, sysdeps/generic/dl-cache.h):

- old, magic "ld.so-1.7.0": a 16-byte header (magic, count), then 12-byte
  entries {int32 flags, uint32 key, uint32 value}; string offsets count from
  the end of the entry array. glibc < 2.32 usually wrote it followed by a new
  section (the "compat" layout), 8-byte aligned;
- new, magic "glibc-ld.so.cache" + version "1.1": a 48-byte header (magic,
  version, count, string length, flags, extension offset), then 24-byte entries
  {int32 flags, uint32 key, uint32 value, uint32 osversion, uint64 hwcap};
  string offsets count from the start of the new header.

key is the soname, value the path the linker opens. The file comes from the
host and is untrusted: every offset is bounds-checked and a bad file raises
LdCacheError naming what is wrong, never an IndexError.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dra_driver.common import node_file
from dra_driver.common.errors import DraError

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache"
NEW_VERSION = b"1.1"
_OLD_HEADER = struct.Struct("<11sxI")  # magic, pad to 4, nlibs
_OLD_ENTRY = struct.Struct("<iII")
_NEW_HEADER = struct.Struct("<17s3sIIB3xI12x")  # magic, version, nlibs, len_strings, flags, extension offset
_NEW_ENTRY = struct.Struct("<iIIIQ")
_ENDIAN_BIG = 3  # cache_file_new.flags: 0 unset, 1 invalid, 2 little, 3 big
_MAX_ENTRIES = 1 << 20  # far above any real cache; a larger count is a corrupt file
MAX_CACHE_BYTES = 256 << 20  # far above any real cache (a few hundred KiB)

FLAG_ELF_LIBC6 = 0x0003
FLAG_TYPE_MASK = 0x00FF
FLAG_ARCH_MASK = 0xFF00
# Architecture flags of 64-bit libraries (dl-cache.h): x86-64, s390x, ppc64, MIPS n64,
# AArch64, MIPS n64 nan2008, RISC-V LP64D, LoongArch LP64D.
ARCH_64BIT = frozenset({0x0300, 0x0400, 0x0500, 0x0700, 0x0A00, 0x0E00, 0x1000, 0x1200})
FLAG_X8664_LIB64 = 0x0300


class LdCacheError(DraError):
    """An ld.so.cache file that cannot be parsed; the message names the file and the problem."""


@dataclass(frozen=True)
class CacheEntry:
    soname: str  # e.g. libcuda.so.1
    path: str  # absolute path the linker opens, e.g. /usr/lib/x86_64-linux-gnu/libcuda.so.1
    flags: int = FLAG_ELF_LIBC6 | FLAG_X8664_LIB64

    @property
    def is_64bit(self) -> bool:
        return self.flags & FLAG_ARCH_MASK in ARCH_64BIT


def read(path: Path) -> list[CacheEntry]:
    """Entries of the cache file at `path` (new section preferred when both layouts are present)."""
    try:
        data = node_file.read_regular(path, MAX_CACHE_BYTES, follow_symlinks=True)  # the host's file: links allowed
    except OSError as exc:
        raise LdCacheError(f"{path}: cannot read the linker cache ({exc.strerror or exc})") from exc
    try:
        return parse(data)
    except LdCacheError as exc:
        raise LdCacheError(f"{path}: {exc}") from exc


def parse(data: bytes) -> list[CacheEntry]:
    if data.startswith(NEW_MAGIC):
        return _parse_new(data, 0)
    if data.startswith(OLD_MAGIC):
        return _parse_old(data)
    raise LdCacheError(f"not an ld.so.cache file (magic {data[:17]!r}; expected {OLD_MAGIC!r} or {NEW_MAGIC!r})")


def _parse_old(data: bytes) -> list[CacheEntry]:
    if len(data) < _OLD_HEADER.size:
        raise LdCacheError("truncated old-format header")
    _magic, count = _OLD_HEADER.unpack_from(data, 0)
    _check_count(count)
    entries_end = _OLD_HEADER.size + count * _OLD_ENTRY.size
    if entries_end > len(data):
        raise LdCacheError(f"old-format header lists {count} entries but the file ends at byte {len(data)}")
    new_start = (entries_end + 7) & ~7  # the compat layout appends a new section, 8-byte aligned
    if data[new_start : new_start + len(NEW_MAGIC)] == NEW_MAGIC:
        return _parse_new(data, new_start)
    entries = []
    for index in range(count):
        flags, key, value = _OLD_ENTRY.unpack_from(data, _OLD_HEADER.size + index * _OLD_ENTRY.size)
        entries.append(_entry(data, entries_end, flags, key, value))
    return entries


def _parse_new(data: bytes, start: int) -> list[CacheEntry]:
    if len(data) < start + _NEW_HEADER.size:
        raise LdCacheError("truncated new-format header")
    _magic, version, count, _strings, flags, _ext = _NEW_HEADER.unpack_from(data, start)
    if version != NEW_VERSION:
        raise LdCacheError(f"unsupported new-format version {version!r} (expected {NEW_VERSION!r})")
    if flags == _ENDIAN_BIG:
        raise LdCacheError("big-endian cache; only little-endian hosts are supported")
    _check_count(count)
    first = start + _NEW_HEADER.size
    if first + count * _NEW_ENTRY.size > len(data):
        raise LdCacheError(f"new-format header lists {count} entries but the file ends at byte {len(data)}")
    entries = []
    for index in range(count):
        entry_flags, key, value, _osv, _hwcap = _NEW_ENTRY.unpack_from(data, first + index * _NEW_ENTRY.size)
        entries.append(_entry(data, start, entry_flags, key, value))
    return entries


def _check_count(count: int) -> None:
    if count > _MAX_ENTRIES:
        raise LdCacheError(f"implausible entry count {count}")


def _entry(data: bytes, base: int, flags: int, key: int, value: int) -> CacheEntry:
    return CacheEntry(soname=_string(data, base + key), path=_string(data, base + value), flags=flags)


def _string(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    if offset >= len(data) or end < 0:
        raise LdCacheError(f"string offset {offset} outside the file or unterminated")
    try:
        return data[offset:end].decode()
    except UnicodeDecodeError as exc:
        raise LdCacheError(f"string at offset {offset} is not UTF-8") from exc


# ---- writing (simulated driver roots and tests) -------------------------------------


def render(entries: Sequence[CacheEntry], layout: str = "new") -> bytes:
    """A cache file holding `entries`: layout "new" (glibc >= 2.32), "old", or "compat" (old + new)."""
    if layout == "new":
        return _render_new(entries)
    if layout == "old":
        return _render_old(entries, with_new=False)
    if layout == "compat":
        return _render_old(entries, with_new=True)
    raise ValueError(f"layout must be new, old or compat, not {layout!r}")


def _string_table(entries: Sequence[CacheEntry], base: int) -> tuple[bytes, list[tuple[int, int]]]:
    """The NUL-terminated strings and, per entry, (key, value) offsets counted from `base` bytes before the table."""
    table = bytearray()
    offsets = []
    for entry in entries:
        key = base + len(table)
        table += entry.soname.encode() + b"\0"
        value = base + len(table)
        table += entry.path.encode() + b"\0"
        offsets.append((key, value))
    return bytes(table), offsets


def _render_new(entries: Sequence[CacheEntry]) -> bytes:
    head = _NEW_HEADER.size + len(entries) * _NEW_ENTRY.size
    table, offsets = _string_table(entries, head)
    out = bytearray(_NEW_HEADER.pack(NEW_MAGIC, NEW_VERSION, len(entries), len(table), 2, 0))
    for entry, (key, value) in zip(entries, offsets):
        out += _NEW_ENTRY.pack(entry.flags, key, value, 0, 0)
    return bytes(out + table)


def _render_old(entries: Sequence[CacheEntry], with_new: bool) -> bytes:
    entries_end = _OLD_HEADER.size + len(entries) * _OLD_ENTRY.size
    if with_new:
        new_section = _render_new(entries)
        padding = b"\0" * (((entries_end + 7) & ~7) - entries_end)
        # glibc's compat layout points the old entries into the new section's string table.
        new_table_at = len(padding) + _NEW_HEADER.size + len(entries) * _NEW_ENTRY.size
        _table, offsets = _string_table(entries, new_table_at)
        tail = padding + new_section
    else:
        table, offsets = _string_table(entries, 0)
        tail = table
    out = bytearray(_OLD_HEADER.pack(OLD_MAGIC, len(entries)))
    for entry, (key, value) in zip(entries, offsets):
        out += _OLD_ENTRY.pack(entry.flags, key, value)
    return bytes(out + tail)
