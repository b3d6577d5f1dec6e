"""The ld.so.cache reader: both glibc layouts, the host's own cache, and corrupt files failing with LdCacheError."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver_nvidia import ldcache
from dra_driver_nvidia.ldcache import CacheEntry, LdCacheError

ENTRIES = [
    CacheEntry("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
    CacheEntry("libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"),
    CacheEntry("libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1", flags=ldcache.FLAG_ELF_LIBC6),
    CacheEntry("libcuda.so.1", "/usr/lib/aarch64-linux-gnu/libcuda.so.1", flags=ldcache.FLAG_ELF_LIBC6 | 0x0A00),
]


@pytest.mark.parametrize("layout", ["new", "old", "compat"])
def test_every_layout_reads_back(layout: str) -> None:
    data = ldcache.render(ENTRIES, layout)
    assert data.startswith(ldcache.NEW_MAGIC if layout == "new" else ldcache.OLD_MAGIC)
    assert ldcache.parse(data) == ENTRIES


def test_64bit_is_told_by_the_architecture_flag() -> None:
    assert [e.is_64bit for e in ENTRIES] == [True, True, False, True]


def test_the_old_section_of_a_compat_file_points_at_real_strings() -> None:
    """Old linkers read only the old entries of a compat file: their offsets must name the same strings."""
    data = ldcache.render(ENTRIES, "compat")
    entries_end = 16 + 12 * len(ENTRIES)
    for index, entry in enumerate(ENTRIES):  # old offsets count from the end of the old entry array
        _flags, key, value = ldcache._OLD_ENTRY.unpack_from(data, 16 + index * 12)
        assert ldcache._string(data, entries_end + key) == entry.soname
        assert ldcache._string(data, entries_end + value) == entry.path


@pytest.mark.skipif(not Path("/etc/ld.so.cache").is_file(), reason="this host has no /etc/ld.so.cache")
def test_this_hosts_own_cache_is_read() -> None:
    entries = ldcache.read(Path("/etc/ld.so.cache"))
    libc = [e for e in entries if e.soname == "libc.so.6" and e.is_64bit]
    assert libc and all(Path(e.path).is_absolute() for e in libc)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not an ld.so.cache file"),
        (b"garbage" * 10, "not an ld.so.cache file"),
        (ldcache.NEW_MAGIC + b"2.0" + bytes(40), "unsupported new-format version"),
        (ldcache.NEW_MAGIC + b"1.1" + bytes(10), "truncated new-format header"),
        (ldcache.OLD_MAGIC + b"\0" + (5).to_bytes(4, "little"), "lists 5 entries"),
    ],
)
def test_bad_files_raise_a_named_error(data: bytes, message: str) -> None:
    with pytest.raises(LdCacheError, match=message):
        ldcache.parse(data)


def test_big_endian_caches_are_refused_plainly() -> None:
    data = bytearray(ldcache.render(ENTRIES))
    data[28] = 3  # cache_file_new.flags: big endian
    with pytest.raises(LdCacheError, match="big-endian"):
        ldcache.parse(bytes(data))


def test_string_offsets_outside_the_file_are_caught() -> None:
    data = bytearray(ldcache.render(ENTRIES[:1]))
    data[48 + 4 : 48 + 8] = (10**6).to_bytes(4, "little")  # the first entry's key offset
    with pytest.raises(LdCacheError, match="outside the file"):
        ldcache.parse(bytes(data))


@pytest.mark.parametrize("layout", ["new", "old", "compat"])
def test_any_truncation_fails_cleanly(layout: str) -> None:
    """A cache cut short anywhere (a host writing it while we read) gives LdCacheError or fewer strings, never a crash."""
    data = ldcache.render(ENTRIES, layout)
    for size in range(len(data)):
        try:
            ldcache.parse(data[:size])
        except LdCacheError:
            continue


def test_read_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ld.so.cache"
    path.write_bytes(b"nope")
    with pytest.raises(LdCacheError, match=str(path)):
        ldcache.read(path)
    with pytest.raises(LdCacheError, match="cannot read"):
        ldcache.read(tmp_path / "missing")
