"""A simulated host driver root for hardware profiles: the files a driver install leaves, named for its version.

Built at run time in a temp dir (no binary blobs in the repository), so `demo`,
the tests and the container-runtime tests exercise driver-file discovery and
the CDI mounts without a GPU. Layout as a Debian/Ubuntu driver package lays it
out: versioned libraries with soname links in the multiarch dir, a real
ld.so.cache (new format) listing them plus a non-driver library and a 32-bit
entry that discovery must skip, the unversioned linker-name links that a
driver installer adds and ldconfig caches (`libcuda.so`, `libnvidia-ml.so`, as
on a real H100 host), a stale library of another version, the
utility binaries as small shell scripts that print the version (they run in a
busybox container), GSP firmware, and the persistenced / fabric manager
sockets as real unix sockets.

Two binaries do what the driver asks of them on a host: `nvidia-cuda-mps-control`
is the stand-in of mps_control_standin.py (a real daemon process, run by this
interpreter), and `nvidia-smi compute-policy -i <uuid> --set-timeslice=<0..3>`
keeps the interval it was given in TIMESLICE_DIR (one file per GPU UUID), where
tests read it; without arguments it prints the version, as before.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from dra_driver_nvidia import ldcache

LIB_DIR = "usr/lib/x86_64-linux-gnu"
LIB32_DIR = "usr/lib/i386-linux-gnu"
# (file stem, soname suffix): the soname is "<stem>.so.<suffix>", or the versioned file itself when suffix is None.
LIBRARIES = (
    ("libcuda", "1"),
    ("libnvidia-ml", "1"),
    ("libnvidia-ptxjitcompiler", "1"),
    ("libnvidia-nvvm", "4"),
    ("libcudadebugger", "1"),
    ("libnvidia-cfg", "1"),
    ("libnvidia-opencl", "1"),
    ("libnvidia-allocator", "1"),
    ("libnvidia-gpucomp", None),
)
# Linker-name links (libX.so -> libX.so.<suffix>) that the real host's ld.so.cache lists as well.
LINKER_NAMES = ("libcuda", "libnvidia-ml")
FIRMWARE = ("gsp_ga10x.bin", "gsp_tu10x.bin")
STALE_VERSION = "1.0.0"  # an old driver's leftover that must not be mounted
TIMESLICE_DIR = "var/lib/nvidia-simulated/timeslice"  # <uuid>: the interval nvidia-smi compute-policy set
MPS_CONTROL_SOURCE = Path(__file__).with_name("mps_control_standin.py")


def build(root: Path, version: str) -> Path:
    """Populate `root` as a host driver root for driver `version`; returns `root`."""
    libs = root / LIB_DIR
    libs.mkdir(parents=True, exist_ok=True)
    entries: list[ldcache.CacheEntry] = []
    for stem, suffix in LIBRARIES:
        real = f"{stem}.so.{version}"
        (libs / real).write_text(f"simulated {stem} {version}\n")
        soname = f"{stem}.so.{suffix}" if suffix else real
        if soname != real:
            (libs / soname).symlink_to(real)
        entries.append(ldcache.CacheEntry(soname, f"/{LIB_DIR}/{soname}"))
        if stem in LINKER_NAMES:
            (libs / f"{stem}.so").symlink_to(soname)
            entries.append(ldcache.CacheEntry(f"{stem}.so", f"/{LIB_DIR}/{stem}.so"))
    (libs / f"libcuda.so.{STALE_VERSION}").write_text("stale\n")
    (libs / "libc.so.6").write_text("not a driver library\n")
    entries.append(ldcache.CacheEntry("libc.so.6", f"/{LIB_DIR}/libc.so.6"))
    lib32 = root / LIB32_DIR
    lib32.mkdir(parents=True, exist_ok=True)
    (lib32 / f"libcuda.so.{version}").write_text("32-bit\n")
    (lib32 / "libcuda.so.1").symlink_to(f"libcuda.so.{version}")
    entries.append(ldcache.CacheEntry("libcuda.so.1", f"/{LIB32_DIR}/libcuda.so.1", flags=ldcache.FLAG_ELF_LIBC6))
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/ld.so.cache").write_bytes(ldcache.render(entries))
    _binaries(root, version)
    firmware = root / "lib/firmware/nvidia" / version
    firmware.mkdir(parents=True, exist_ok=True)
    for name in FIRMWARE:
        (firmware / name).write_text(f"simulated firmware {version}\n")
    for relative in ("var/run/nvidia-persistenced/socket", "var/run/nvidia-fabricmanager/socket"):
        _unix_socket(root / relative)
    return root


def _binaries(root: Path, version: str) -> None:
    bin_dir = root / "usr/bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-server"):
        _script(bin_dir / name, f"#!/bin/sh\necho \"simulated {name} driver {version}\"\n")
    _script(bin_dir / "nvidia-smi", _NVIDIA_SMI.format(version=version, timeslice=TIMESLICE_DIR))
    _script(bin_dir / "nvidia-cuda-mps-control", f"#!{sys.executable}\n" + MPS_CONTROL_SOURCE.read_text())


# Only `compute-policy -i <uuid> --set-timeslice=<n>` (or `--set-timeslice <n>`) changes anything; the UUID is
# checked to be a plain GPU UUID before it names a file.
_NVIDIA_SMI = """#!/bin/sh
if [ "$#" -eq 0 ]; then echo "simulated nvidia-smi driver {version}"; exit 0; fi
if [ "$1" != compute-policy ]; then echo "simulated nvidia-smi: unsupported arguments: $*" >&2; exit 2; fi
shift; uuid=""; slice=""
while [ "$#" -gt 0 ]; do
  case "$1" in
    -i) uuid="$2"; shift 2 ;;
    --set-timeslice=*) slice="${{1#--set-timeslice=}}"; shift ;;
    --set-timeslice) slice="$2"; shift 2 ;;
    *) echo "Invalid combination of input arguments: $1" >&2; exit 2 ;;
  esac
done
case "$uuid" in GPU-*) ;; *) echo "No devices were found matching $uuid" >&2; exit 6 ;; esac
case "$uuid" in *[!A-Za-z0-9-]*) echo "No devices were found matching $uuid" >&2; exit 6 ;; esac
case "$slice" in 0|1|2|3) ;; *) echo "Invalid timeslice value: $slice" >&2; exit 2 ;; esac
umask 022
# The state lives under the root this script is in now: the root is built elsewhere and renamed into place.
state="$(cd "$(dirname "$0")/../.." && pwd -P)/{timeslice}"
mkdir -p "$state" && echo "$slice" > "$state/$uuid" || exit 1
echo "Set timeslice to $slice for GPU $uuid"
"""


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def _unix_socket(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(str(path))  # the socket file stays after close, as a daemon's would while it runs
        except OSError:
            pass  # path too long for a unix socket (deep $TMPDIR): the simulated node then has no such daemon
