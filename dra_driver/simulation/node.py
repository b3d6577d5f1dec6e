"""A simulated node's host-side files, for `run --profile --simulated-root` inside a real cluster.

A container runtime (containerd, CRI-O) reads a CDI spec on the host: every device node and mount source
it names must exist there, at that path, for as long as a container using it may (re)start. A simulated
backend's own scratch directory lives in the driver pod's private /tmp and goes with the pod, so with a
simulated root the files workloads need live on a host path mounted at the same path in the pod instead:

- `<root>/dev/...`: the device nodes the specs name, made when a spec is written. Every one is a
  character node with /dev/null's numbers (1:3), the node kind every runtime accepts and whose device
  cgroup rule is harmless: nothing a workload does with it reaches hardware. An existing node with other
  numbers, or anything that is not a character node, is refused, never replaced; no symlink is followed.
- `<root>/<name>/` (e.g. the NVIDIA driver root for a driver version): built once, atomically (a temp
  directory renamed into place), and shared by every later driver pod.

Each daemon holds a shared flock on `<root>/.lock` while it runs. A stopping daemon removes the root's
contents only when it can take the lock exclusively (no other daemon, e.g. the other pod of a rolling
update, uses it) and nothing prepared references the root: no file in the CDI dir names it and no
checkpoint record exists under the state dir. When unsure, it keeps the files.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from dra_driver.common import json_text, node_file
from dra_driver.common.errors import DraError
from dra_driver.common.logs import fields
from dra_driver.common import file_modes

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
DEV_DIR = "dev"
NODE_NUMBERS = os.makedev(1, 3)  # /dev/null's
_FORBIDDEN = (Path("/dev"), Path("/proc"), Path("/sys"))
_MAX_SCANNED_FILE = 4 << 20  # CDI files bigger than this are not ours: counted as a reference, read no further


class SimulatedRootError(DraError):
    """The simulated root or one of its device nodes cannot be used as asked."""


def check_root(path: Path) -> Path:
    """An absolute path outside /dev, /proc and /sys, without '..': raise SimulatedRootError naming the fix."""
    if not path.is_absolute() or ".." in path.parts or path == Path("/"):
        raise SimulatedRootError(f"--simulated-root {path}: must be an absolute host path below / without '..' (mounted at the same path in the pod)")
    for real in {path, path.resolve()}:
        if any(real == forbidden or real.is_relative_to(forbidden) for forbidden in _FORBIDDEN):
            raise SimulatedRootError(
                f"--simulated-root {path}: must not be under /dev, /proc or /sys (real devices live there); use e.g. /var/run/dra-driver-sim"
            )
    return path


def build_shared(root: Path, name: str, build: Callable[[Path], object]) -> Path:
    """`<root>/<name>`, built by `build(directory)` the first time, by whichever daemon comes first.

    Built in a temp directory beside it and renamed into place: a daemon killed half-way leaves only a temp
    directory, and two daemons building at once both end up using the one that was renamed first.
    """
    if "/" in name or name in ("", ".", "..") or name.startswith("."):
        raise SimulatedRootError(f"shared directory name {name!r} is not a plain name")
    final = root / name
    if final.is_dir() and not final.is_symlink():
        return final
    temp = Path(tempfile.mkdtemp(prefix=f".build-{name}-", dir=root))
    try:
        build(temp)
        _narrow_modes(temp)
        temp.chmod(0o755)
        try:
            os.rename(temp, final)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
    finally:
        if temp.exists():
            shutil.rmtree(temp, ignore_errors=True)  # another daemon's rename came first
    if not final.is_dir() or final.is_symlink():
        raise SimulatedRootError(f"{final}: not a directory after building it; remove it and restart the driver")
    return final


def _narrow_modes(tree: Path) -> None:
    """No group/other write bit on anything `build` made, whatever the umask (the tree is a host path every pod of
    the simulated overlay mounts). Links are left alone: their mode is not used."""
    for directory, subdirs, files in os.walk(tree):
        for name in [*subdirs, *files]:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            if not stat.S_ISLNK(info.st_mode) and info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                os.chmod(path, stat.S_IMODE(info.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))


class SimulatedRoot:
    """One daemon's use of the simulated root: opened (shared lock) at start, released at stop."""

    def __init__(self, path: Path) -> None:
        self.path = check_root(path)
        try:
            file_modes.make_dirs(self.path, file_modes.CDI_DIR)  # the host's: runtimes read the device nodes under it
            self._fd: int | None = os.open(self.path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise SimulatedRootError(
                f"--simulated-root {path}: cannot create or open it ({exc.strerror or exc}); mount a writable host path there"
            ) from exc
        fcntl.flock(self._fd, fcntl.LOCK_SH)  # waits while a stopping daemon removes the contents
        self.dev_root.mkdir(mode=0o755, exist_ok=True)

    @property
    def dev_root(self) -> Path:
        return self.path / DEV_DIR

    # ---------------------------------------------------------------- device nodes

    def make_device_nodes(self, spec: Mapping[str, Any]) -> None:
        """Make every device node a CDI spec names on the host (before the spec is written)."""
        for host_path in _device_node_paths(spec):
            self._make_node(Path(host_path))

    def make_nodes_of_specs(self, cdi_dir: Path) -> None:
        """Start-up: the nodes of specs already written (a spec's node may have been removed meanwhile)."""
        for spec_file in sorted(cdi_dir.glob("*.json")):
            try:
                spec = json_text.loads(node_file.read_regular(spec_file, _MAX_SCANNED_FILE))
            except (OSError, ValueError):
                continue  # not ours to judge here: recovery reports damaged specs
            if isinstance(spec, dict) and any(Path(p).is_relative_to(self.dev_root) for p in _device_node_paths(spec)):
                self.make_device_nodes(spec)

    def _make_node(self, path: Path) -> None:
        if not path.is_relative_to(self.dev_root) or ".." in path.parts or path == self.dev_root:
            raise SimulatedRootError(
                f"a simulated device's spec names the host device node {path}, outside the simulated root's {self.dev_root}; "
                "the backend must build its device paths under the settings' dev_root"
            )
        parts = path.relative_to(self.dev_root).parts
        fd = os.open(self.dev_root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            for part in parts[:-1]:  # walk by directory fd: a symlink planted on the way is never followed
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = next_fd
            try:
                os.mknod(parts[-1], 0o666 | stat.S_IFCHR, NODE_NUMBERS, dir_fd=fd)
                os.chmod(parts[-1], 0o666, dir_fd=fd)  # as /dev/null: mknod applied the umask
                log.debug("simulated device node made", extra=fields(path=str(path)))
            except FileExistsError:
                found = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISCHR(found.st_mode) or found.st_rdev != NODE_NUMBERS:
                    raise SimulatedRootError(
                        f"{path} exists and is not a character node with /dev/null's numbers (1:3); it is left alone: "
                        f"remove it if it is a leftover, or choose another --simulated-root"
                    ) from None
        except OSError as exc:
            raise SimulatedRootError(f"cannot make the simulated device node {path}: {exc.strerror or exc} (the driver pod needs CAP_MKNOD)") from exc
        finally:
            os.close(fd)

    # ---------------------------------------------------------------- release

    def release(self, cdi_dir: Path, state_dir: Path | None) -> bool:
        """At stop: remove the root's contents if no other daemon uses it and nothing prepared references it.
        Returns whether it was removed."""
        if self._fd is None:
            return False
        fd, self._fd = self._fd, None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("simulated root kept: another driver instance uses it", extra=fields(root=str(self.path)))
                return False
            reason = self._referenced(cdi_dir, state_dir)
            if reason is not None:
                log.info("simulated root kept: prepared claims reference it", extra=fields(root=str(self.path), evidence=reason))
                return False
            for entry in os.scandir(self.path):
                if entry.name == LOCK_NAME:
                    continue  # waiting daemons hold its descriptor: removing it would split them
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
            log.info("simulated root removed: nothing references it", extra=fields(root=str(self.path)))
            return True
        except OSError as exc:
            log.warning("simulated root left in place", extra=fields(root=str(self.path), error=str(exc)))
            return False
        finally:
            os.close(fd)

    def _referenced(self, cdi_dir: Path, state_dir: Path | None) -> str | None:
        """Evidence that a prepared claim may still use the root, or None."""
        needle = os.fsencode(str(self.path))
        for entry in _files(cdi_dir):
            try:
                if needle in node_file.read_regular(entry.path, _MAX_SCANNED_FILE):
                    return entry.path
            except OSError:
                return entry.path  # unreadable, too large, not a regular file: maybe ours
        if state_dir is not None:
            for driver_dir in _dirs(state_dir):
                records = next(iter(_files(Path(driver_dir.path) / "checkpoint.d")), None)
                if records is not None:
                    return records.path
        return None


def _files(directory: Path) -> Iterable[os.DirEntry[str]]:
    try:
        return [e for e in os.scandir(directory) if e.is_file(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def _dirs(directory: Path) -> Iterable[os.DirEntry[str]]:
    try:
        return [e for e in os.scandir(directory) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def _device_node_paths(spec: Mapping[str, Any]) -> list[str]:
    edits = [d.get("containerEdits") or {} for d in spec.get("devices") or [] if isinstance(d, dict)]
    edits.append(spec.get("containerEdits") or {})
    return [str(n.get("hostPath") or n.get("path")) for e in edits if isinstance(e, dict) for n in e.get("deviceNodes") or [] if isinstance(n, dict)]
