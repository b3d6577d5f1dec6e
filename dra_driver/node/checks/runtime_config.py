"""Whether the container runtime reads the CDI specs this driver writes: containerd's and CRI-O's configuration.

containerd (CRI plugin):
- config `version = 3` (containerd 2.x): `[plugins."io.containerd.cri.v1.runtime"]`, CDI on by default;
- config `version = 2` (containerd 1.7, or 2.x reading an old file): `[plugins."io.containerd.grpc.v1.cri"]`;
  containerd 1.7 leaves CDI off unless `enable_cdi = true` (2.x turns it on), so an unset value is a warning;
- no version (1.x): `[plugins.cri]`, CDI off unless enabled.
`cdi_spec_dirs` defaults to ["/etc/cdi", "/var/run/cdi"] everywhere. CRI-O always reads CDI specs, from
`cdi_spec_dirs` in `[crio.runtime]` (same default); /etc/crio/crio.conf.d/*.conf override crio.conf in order.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from dra_driver.common import node_file

DEFAULT_CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
DEFAULT_CONTAINERD_CONFIG = Path("/etc/containerd/config.toml")
DEFAULT_CRIO_CONFIG = Path("/etc/crio/crio.conf")
_MAX_CONFIG_BYTES = 4 * 1024 * 1024
_CRI_SECTIONS = {3: ("io.containerd.cri.v1.runtime",), 2: ("io.containerd.grpc.v1.cri",), 1: ("cri",)}


@dataclass(frozen=True)
class RuntimeCdi:
    """What one runtime's configuration says about CDI."""

    runtime: str  # "containerd" or "cri-o"
    source: str  # the file(s) read
    enabled: bool | None  # None: not set, and the default depends on the runtime's version
    spec_dirs: tuple[str, ...]
    problem: str = ""  # the file could not be read or parsed

    def reads(self, cdi_dir: Path) -> bool:
        return same_dir(cdi_dir, self.spec_dirs)


def same_dir(cdi_dir: Path, dirs: Sequence[str]) -> bool:
    """/var/run is a link to /run on every current distribution: both spellings name one directory."""
    wanted = _canonical(str(cdi_dir))
    return any(_canonical(d) == wanted for d in dirs)


def _canonical(path: str) -> str:
    text = str(PurePosixPath(path))
    return "/run" + text[len("/var/run") :] if text == "/var/run" or text.startswith("/var/run/") else text


def _load(path: Path) -> dict[str, Any]:
    raw = node_file.read_regular(path, _MAX_CONFIG_BYTES, follow_symlinks=True)  # the host's: links are normal there
    return tomllib.loads(raw.decode("utf-8"))


def containerd_cdi(path: Path) -> RuntimeCdi | None:
    """None when there is no such file (containerd not installed, or running on its built-in defaults)."""
    if not path.is_file():
        return None
    try:
        config = _load(path)
    except (OSError, ValueError, UnicodeDecodeError) as exc:  # tomllib.TOMLDecodeError is a ValueError
        return RuntimeCdi("containerd", str(path), None, (), problem=f"cannot read {path}: {exc}")
    version = config.get("version", 1)
    plugins = config.get("plugins") if isinstance(config.get("plugins"), Mapping) else {}
    section: Mapping[str, Any] = {}
    for name in _CRI_SECTIONS.get(version if isinstance(version, int) else 1, _CRI_SECTIONS[1]):
        found = plugins.get(name) if isinstance(plugins, Mapping) else None
        if isinstance(found, Mapping):
            section = found
    enabled = section.get("enable_cdi")
    if version == 3 and enabled is None:
        enabled = True  # containerd 2.x: on by default
    return RuntimeCdi("containerd", f"{path} (config version {version})", enabled if isinstance(enabled, bool) else None, _dirs(section))


def crio_cdi(path: Path) -> RuntimeCdi | None:
    """crio.conf and its drop-in directory (<path>.d/*.conf, later files win); None when neither exists."""
    files = ([path] if path.is_file() else []) + sorted(Path(f"{path}.d").glob("*.conf"))
    if not files:
        return None
    dirs: tuple[str, ...] = DEFAULT_CDI_DIRS
    for file in files:
        try:
            runtime = (_load(file).get("crio") or {}).get("runtime") or {}
        except (OSError, ValueError, UnicodeDecodeError, AttributeError) as exc:
            return RuntimeCdi("cri-o", str(file), True, (), problem=f"cannot read {file}: {exc}")
        if isinstance(runtime, Mapping) and "cdi_spec_dirs" in runtime:
            dirs = _dirs(runtime)
    return RuntimeCdi("cri-o", ", ".join(str(f) for f in files), True, dirs)


def _dirs(section: Mapping[str, Any]) -> tuple[str, ...]:
    value = section.get("cdi_spec_dirs")
    if value is None:
        return DEFAULT_CDI_DIRS
    return tuple(str(v) for v in value if isinstance(v, str)) if isinstance(value, list) else ()
