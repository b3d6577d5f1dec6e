"""The host NVIDIA driver's user-space files a container needs, found once at start.

CUDA needs the user-space half of the driver (libcuda, libnvidia-ml, the JIT
compiler, ...) at exactly the kernel driver's version, so these files come from
the host, never from the image. What is looked for follows NVIDIA's own CDI
generator (nvidia-container-toolkit, pkg/nvcdi driver-nvml.go, internal/discover):

- libraries: every 64-bit entry of the driver root's ld.so.cache whose file is
  `*.so.<driver version>`, plus the legacy `libnvidia-nvvm70.so.*`; then the
  library directories for what the cache does not list;
- binaries: nvidia-smi, nvidia-debugdump, nvidia-persistenced and the MPS
  control/server binaries;
- GSP firmware: `lib/firmware/nvidia/<version>/gsp*.bin`;
- IPC: the persistenced and fabric manager sockets (an MPS claim's pipe
  directory is its own, see dra_driver_nvidia.sharing).

Paths are looked up under `driver_root` (where this process sees the driver
root) and written into the CDI spec under `host_root` (where the container
runtime on the host sees it: `/`, or a GPU Operator root such as
/run/nvidia/driver); the container path is the path inside the driver root.
Symlinks are resolved inside the driver root, so an absolute link target never
escapes it.

Usable in any image: with NVIDIA's CDI hook binary (`--nvidia-cdi-hook-path`)
the spec carries its create-symlinks and update-ldcache hooks, as upstream's
specs do; without one, each library is also mounted at its soname path (and
libcuda.so), where the linker of most images finds it.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from dra_driver.common.logs import fields
from dra_driver.backend.interface import ContainerEdits, Hook, Mount
from dra_driver_nvidia import ldcache

log = logging.getLogger(__name__)

LD_CACHE = "etc/ld.so.cache"
# Library directories searched after the cache (nvidia-container-toolkit's defaults, 64-bit).
LIBRARY_DIRS = (
    "usr/lib64", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "lib64",
    "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "usr/lib", "lib",
)  # fmt: skip
LEGACY_LIBRARIES = re.compile(r"^libnvidia-nvvm70\.so\.\d+\Z")
BINARIES = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
BINARY_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin", "usr/local/bin", "usr/local/sbin")
FIRMWARE_DIRS = ("lib/firmware", "usr/lib/firmware")
SOCKETS = ("var/run/nvidia-persistenced/socket", "var/run/nvidia-fabricmanager/socket")
_VERSION = re.compile(r"^\d+(\.\d+){1,3}\Z")
_SONAME_LINK = re.compile(r"^lib.+\.so\.\d+\Z")
_MAX_LINKS = 40  # like the kernel's ELOOP limit
READ_ONLY = ("ro", "nosuid", "nodev", "bind")
READ_WRITE = ("rw", "nosuid", "nodev", "bind")


@dataclass(frozen=True)
class Library:
    path: str  # container path of the versioned file, e.g. /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05
    sonames: tuple[str, ...] = ()  # e.g. ("libcuda.so.1",); empty when the file name is its own soname


@dataclass
class DriverFiles:
    """What was found; paths are container paths (the same paths inside the driver root)."""

    version: str
    host_root: Path
    libraries: list[Library] = field(default_factory=list)
    binaries: list[str] = field(default_factory=list)
    firmware: list[str] = field(default_factory=list)
    sockets: list[str] = field(default_factory=list)

    def host_path(self, container_path: str) -> str:
        return str(self.host_root / container_path.lstrip("/"))

    def is_empty(self) -> bool:
        return not (self.libraries or self.binaries or self.firmware or self.sockets)


# ---- discovery ---------------------------------------------------------------------


def discover(driver_root: Path, version: str, host_root: Path | None = None) -> DriverFiles:
    """The driver files for `version` under `driver_root`; logs what is missing, never raises for it."""
    found = DriverFiles(version=version, host_root=host_root or driver_root)
    if not _VERSION.match(version):
        # The version names paths (firmware dir, library suffix): refuse anything but digits and dots.
        log.warning("driver version from NVML is not a version number; no driver files go into CDI specs",
                    extra=fields(version=version))  # fmt: skip
        return found
    found.libraries = _libraries(driver_root, version)
    found.binaries = [p for name in BINARIES if (p := _first_file(driver_root, BINARY_DIRS, name, executable=True))]
    found.firmware = _firmware(driver_root, version)
    found.sockets = [f"/{relative}" for relative in SOCKETS if _is_socket(driver_root / relative)]
    log.info(
        "NVIDIA driver files found",
        extra=fields(driver_root=str(driver_root), host_root=str(found.host_root), version=version,
                     libraries=len(found.libraries), binaries=len(found.binaries), firmware=len(found.firmware),
                     sockets=len(found.sockets)),
    )  # fmt: skip
    if not any(lib.path.rsplit("/", 1)[-1].startswith("libcuda.so.") for lib in found.libraries):
        log.warning("libcuda.so for the driver version not found under the driver root; CUDA will not start in containers "
                    "unless the image brings a matching one (check --driver-root)", extra=fields(driver_root=str(driver_root)))  # fmt: skip
    return found


def _libraries(root: Path, version: str) -> list[Library]:
    wanted = f".so.{version}"
    sonames: dict[str, set[str]] = {}  # container path of the real file -> sonames pointing at it

    def consider(soname: str | None, link_path: str) -> None:
        real = resolve_in_root(root, link_path)
        if real is None:
            return
        name = real.rsplit("/", 1)[-1]
        if not (name.endswith(wanted) or LEGACY_LIBRARIES.match(name)) or not (root / real.lstrip("/")).is_file():
            return
        names = sonames.setdefault(real, set())
        if soname and soname != name:
            names.add(soname)

    for entry in _cache_entries(root):
        if entry.is_64bit and PurePosixPath(entry.path).is_absolute():
            consider(entry.soname, entry.path)
    for directory in LIBRARY_DIRS:
        base = root / directory
        if not base.is_dir():
            continue
        for child in sorted(base.iterdir()):
            name = child.name
            if name.endswith(wanted) or LEGACY_LIBRARIES.match(name):
                consider(None, f"/{directory}/{name}")
            elif child.is_symlink() and _SONAME_LINK.match(name):
                consider(name, f"/{directory}/{name}")  # a soname link the cache did not list
    return [Library(path, tuple(sorted(names))) for path, names in sorted(sonames.items())]


def _cache_entries(root: Path) -> list[ldcache.CacheEntry]:
    path = root / LD_CACHE
    if not path.is_file():
        log.info("no linker cache under the driver root; searching library directories only", extra=fields(path=str(path)))
        return []
    try:
        return ldcache.read(path)
    except ldcache.LdCacheError as exc:
        log.warning("linker cache unreadable; searching library directories only", extra=fields(error=str(exc)))
        return []


def _first_file(root: Path, directories: Iterable[str], name: str, executable: bool = False) -> str | None:
    for directory in directories:
        real = resolve_in_root(root, f"/{directory}/{name}")
        if real is None:
            continue
        host = root / real.lstrip("/")
        if host.is_file() and (not executable or os.access(host, os.X_OK)):
            return real
    return None


def _firmware(root: Path, version: str) -> list[str]:
    found: list[str] = []
    for directory in FIRMWARE_DIRS:
        base = root / directory / "nvidia" / version
        if base.is_dir():
            found += [f"/{directory}/nvidia/{version}/{p.name}" for p in sorted(base.glob("gsp*.bin")) if p.is_file()]
            if found:
                break  # the kernel loads from the first directory that has it
    return found


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.stat().st_mode)
    except OSError:
        return False


def resolve_in_root(root: Path, path: str) -> str | None:
    """`path` (absolute, inside `root`) with every symlink resolved as if `root` were `/`; None if it is missing,
    loops, or is not a plain path. Absolute link targets are re-rooted, and `..` stops at the root."""
    parts = [p for p in path.split("/") if p]
    resolved: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part in (".", ""):
            continue
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = root.joinpath(*resolved, part)
        if candidate.is_symlink():
            hops += 1
            if hops > _MAX_LINKS:
                return None
            target = os.readlink(candidate)
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p] + parts
            continue
        if not candidate.exists():
            return None
        resolved.append(part)
    return "/" + "/".join(resolved)


# ---- container edits ------------------------------------------------------------------


def claim_edits(files: DriverFiles, hook_path: str | None) -> ContainerEdits:
    """Mounts (and hooks) every container using a claim gets once: the spec-level containerEdits."""
    edits = ContainerEdits()
    if files.is_empty():
        return edits
    for library in files.libraries:
        edits.mounts.append(_mount(files, library.path))
    for path in [*files.binaries, *files.firmware, *files.sockets]:
        edits.mounts.append(_mount(files, path))
    if hook_path:
        edits.hooks.extend(_hooks(files, hook_path))
    else:
        for library in files.libraries:
            directory = library.path.rsplit("/", 1)[0]
            for link in _link_names(library):
                edits.mounts.append(Mount(host_path=files.host_path(library.path), container_path=f"{directory}/{link}", options=READ_ONLY))
    return edits


def _mount(files: DriverFiles, path: str, options: tuple[str, ...] = READ_ONLY) -> Mount:
    return Mount(host_path=files.host_path(path), container_path=path, options=options)


def _link_names(library: Library) -> list[str]:
    """Names the library must also answer to: its sonames, and libcuda.so, which many programs dlopen.

    Each name once: a host whose cache lists the linker name too (`libcuda.so`, as the driver on a
    real H100 host does) would otherwise get two mounts of one file on one container path.
    """
    names = list(dict.fromkeys(library.sonames))
    if "libcuda.so.1" in names and "libcuda.so" not in names:
        names.append("libcuda.so")
    return names


def _hooks(files: DriverFiles, hook_path: str) -> list[Hook]:
    """nvidia-cdi-hook create-symlinks (soname links) and update-ldcache (the library folders), as nvcdi emits them."""
    name = PurePosixPath(hook_path).name
    fixed = (name, "hook") if name == "nvidia-ctk" else (name,)
    env = ("NVIDIA_CTK_DEBUG=false",)
    links: list[str] = []
    for library in files.libraries:
        directory, file_name = library.path.rsplit("/", 1)
        links += [f"{file_name}::{directory}/{link}" for link in _link_names(library)]
    hooks = []
    if links:
        args = [arg for link in links for arg in ("--link", link)]
        hooks.append(Hook(hook_name="createContainer", path=hook_path, args=(*fixed, "create-symlinks", *args), env=env))
    folders = list(dict.fromkeys(library.path.rsplit("/", 1)[0] for library in files.libraries))
    if folders:
        args = [arg for folder in folders for arg in ("--folder", folder)]
        hooks.append(Hook(hook_name="createContainer", path=hook_path, args=(*fixed, "update-ldcache", *args), env=env))
    return hooks
