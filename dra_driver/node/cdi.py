"""CDI spec files: one transient spec per prepared claim.

Layout (our convention, documented in docs/plugin.md):
- kind `k8s.<driver>/device`, e.g. `k8s.gpu.nvidia.com/device`;
- file `<cdi_dir>/k8s.<driver>-device_<claimUID>.json`;
- one CDI device per allocated (pool, device[, shareID]), named
  `<claimUID>-<pool>-<device>[-<shareID>]`; a device in several results of one
  claim (adminAccess in two requests) is one CDI device, because CDI requires
  unique names within a spec;
- edits describing one request's devices as a set (`PreparedClaim.request_edits`,
  e.g. a visibility env var) go to an extra CDI device `<claimUID>-request-<request>`
  whose ID is added to every device of that request: the kubelet gives a
  container only the CDI IDs of the requests it references, so it sees only
  its own request's set;
- edits that belong to the claim as a whole go to the spec-level
  `containerEdits`, which CDI applies once when any device of the spec is
  injected: exactly "once per container that uses this claim".

Files are written atomically (temp file `.<spec name>.<random>.tmp` in the same
directory, rename; see write_spec_atomic on durability) with the lowest
`cdiVersion` the content needs, because runtimes embed older CDI libraries that
reject newer version strings. Temp files a kill -9 left behind are removed at
start (`leftover_temp_files`).

Beside each claim's spec lies its claim file `.k8s.<driver>-device_<claimUID>.claim`:
the claim's record (UID, namespace, name, devices with pool, request, shareID and
CDI IDs, backend state, the spec's text), checksummed. The spec is the evidence
that a claim is prepared; the claim file says what it holds, so start-up rebuilds
a lost or damaged checkpoint record from it. It is not a spec annotation because
annotations need cdiVersion 0.6.0, which the CDI library of podman 4.3 (and
containerd 1.7-era runtimes) rejects (tests/container_runtime); its dot-name not
ending in .json/.yaml keeps runtimes from reading it.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.common.atomic_file import TEMP_SUFFIX, replace_file
from dra_driver.common import node_file
from dra_driver.common.logs import fields
from dra_driver.model.names import uid_problem
from dra_driver.common.signed_json import SignedJsonError, signed_text, verified_body
from dra_driver.backend.interface import ContainerEdits, DeviceNode, Hook, Mount, env_name_part

log = logging.getLogger(__name__)

CDI_CLASS = "device"
SPEC_SUFFIX = ".json"
CLAIM_FILE_SUFFIX = ".claim"
# A spec or claim file of one claim is KiBs (a device's nodes, mounts and hooks); far more is not ours.
MAX_FILE_BYTES = 64 << 20


class SpecUnreadable(ValueError):
    """A spec file that is not a CDI spec we can read (not JSON, not an object, no devices list)."""


def cdi_vendor(driver: str) -> str:
    return f"k8s.{driver}"


def cdi_kind(driver: str) -> str:
    return f"{cdi_vendor(driver)}/{CDI_CLASS}"


_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")


def cdi_device_name(claim_uid: str, pool: str, device: str, share_id: str | None = None) -> str:
    """`<claimUID>-<pool>-<device>[-<shareID>]`: unique per (pool, device, share) within the claim.

    Pool names may hold `/` (not allowed in CDI names); it becomes `_`, which a
    pool or device name (DNS subdomain/label) can never contain, so no collision.
    """
    name = _NAME_UNSAFE.sub("_", f"{claim_uid}-{pool}-{device}")
    return f"{name}-{share_id}" if share_id else name


def request_device_name(claim_uid: str, request: str) -> str:
    """The extra CDI device carrying one request's set-wide edits (e.g. a visibility env listing its devices)."""
    return f"{claim_uid}-request-{request}"


def qualified_id(driver: str, name: str) -> str:
    """The fully-qualified CDI device name returned to the kubelet: vendor/class=name."""
    return f"{cdi_kind(driver)}={name}"


def spec_path(cdi_dir: Path, driver: str, claim_uid: str) -> str:
    """The claim's spec file; refuses a UID that is not one (no path is ever built from it). A str, not a Path:
    a Path would intern the claim's file name (node_file.child_path)."""
    return node_file.child_path(cdi_dir, _spec_name(driver, claim_uid) + SPEC_SUFFIX)


def _spec_name(driver: str, claim_uid: str) -> str:
    """`k8s.<driver>-device_<claimUID>`: the spec's name without its suffix; the claim UID checked first."""
    problem = uid_problem(claim_uid)
    if problem is not None:
        raise ValueError(f"claim UID {problem}: no CDI spec path is built from it")
    return f"{cdi_vendor(driver)}-{CDI_CLASS}_{claim_uid}"


def claim_uid_of(path: Path, driver: str) -> str | None:
    """The claim UID encoded in one of our spec file names, or None if the file is not ours.

    We only ever write names with a valid UID (spec_path), so a name holding anything else is not ours,
    and an odd name never flows back into a path or a lock name.
    """
    return _uid_of_spec_name(path.name, f"{cdi_vendor(driver)}-{CDI_CLASS}_")


def _uid_of_spec_name(name: str, prefix: str) -> str | None:
    if name.startswith(prefix) and name.endswith(SPEC_SUFFIX):
        uid = name[len(prefix) : -len(SPEC_SUFFIX)]
        return uid if uid_problem(uid) is None else None
    return None


def _uid_of_claim_file_name(name: str, prefix: str) -> str | None:
    if not (name.startswith(".") and name.endswith(CLAIM_FILE_SUFFIX)):
        return None
    return _uid_of_spec_name(name[1 : -len(CLAIM_FILE_SUFFIX)] + SPEC_SUFFIX, prefix)


def claims_on_disk(cdi_dir: Path, driver: str) -> set[str]:
    """UIDs of the claims with a spec or a claim file of this driver in cdi_dir: one listing, names only (start-up
    looks for claims on disk without a record; with thousands of claims a Path per entry cost more than the rest)."""
    prefix = f"{cdi_vendor(driver)}-{CDI_CLASS}_"
    found: set[str] = set()
    for name in _names(cdi_dir):
        uid = _uid_of_spec_name(name, prefix) or _uid_of_claim_file_name(name, prefix)
        if uid is not None:
            found.add(uid)
    return found


def our_spec_files(cdi_dir: Path, driver: str) -> dict[str, Path]:
    """Claim UID -> spec file, for every spec file of this driver in cdi_dir."""
    return _by_claim(cdi_dir, lambda path: claim_uid_of(path, driver))


def _by_claim(cdi_dir: Path, uid_of: Callable[[Path], str | None]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in _entries(cdi_dir):
        uid = uid_of(path)
        if uid is not None:
            found[uid] = path
    return found


def leftover_temp_files(cdi_dir: Path, driver: str) -> list[tuple[str, Path]]:
    """(claim UID or None, path) of the temp files our atomic writes left behind (a kill -9 mid-write).

    A temp file is `.<spec or claim file name>.<random>.tmp`, so it names its claim.
    """
    found: list[tuple[str, Path]] = []
    # Names first: start-up lists thousands of specs here, and only temp files need a Path.
    for name in (n for n in _names(cdi_dir) if n.endswith(TEMP_SUFFIX)):
        path = cdi_dir / name
        if not name.startswith("."):
            continue
        target = name[1 : -len(TEMP_SUFFIX)].rpartition(".")[0]  # drop the random part (no dots in it)
        uid = (claim_uid_of(path.with_name(target), driver) or claim_uid_of_claim_file(path.with_name(target), driver)) if target else None
        if uid is not None:
            found.append((uid, path))
    return found


def _entries(cdi_dir: Path) -> list[Path]:
    return [cdi_dir / name for name in _names(cdi_dir)]


def _names(cdi_dir: Path) -> list[str]:
    try:
        return os.listdir(cdi_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:  # unreadable: nothing can be listed, and that must not stop the driver
        log.error("CDI directory unreadable", extra=fields(path=str(cdi_dir), error=str(exc)))
        return []


# --- rendering ---------------------------------------------------------------


def _render_node(node: DeviceNode) -> dict[str, Any]:
    out: dict[str, Any] = {"path": node.path}
    if node.host_path and node.host_path != node.path:
        out["hostPath"] = node.host_path
    for key, value in (("type", node.type), ("major", node.major), ("minor", node.minor), ("permissions", node.permissions)):
        if value is not None:
            out[key] = value
    return out


def _render_mount(mount: Mount) -> dict[str, Any]:
    out: dict[str, Any] = {"hostPath": mount.host_path, "containerPath": mount.container_path}
    if mount.options:
        out["options"] = list(mount.options)
    if mount.type:
        out["type"] = mount.type
    return out


def _render_hook(hook: Hook) -> dict[str, Any]:
    out: dict[str, Any] = {"hookName": hook.hook_name, "path": hook.path}
    if hook.args:
        out["args"] = list(hook.args)
    if hook.env:
        out["env"] = list(hook.env)
    if hook.timeout is not None:
        out["timeout"] = hook.timeout
    return out


def render_edits(edits: ContainerEdits) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if edits.env:
        out["env"] = list(edits.env)
    if edits.device_nodes:
        out["deviceNodes"] = [_render_node(n) for n in edits.device_nodes]
    if edits.mounts:
        out["mounts"] = [_render_mount(m) for m in edits.mounts]
    if edits.hooks:
        out["hooks"] = [_render_hook(h) for h in edits.hooks]
    return out


def device_marker_env(driver: str, device: str) -> str:
    """An env entry naming the device; CDI requires every device to carry non-empty edits."""
    return f"DRA_{env_name_part(driver)}_DEVICE_{env_name_part(device)}={device}"


@dataclass(frozen=True)
class SpecDevice:
    name: str  # CDI device name (already claim-scoped)
    device: str  # device name in the pool, for the marker env
    edits: ContainerEdits


def build_claim_spec(driver: str, devices: Sequence[SpecDevice], claim_edits: ContainerEdits) -> dict[str, Any]:
    """The CDI spec dict of one claim, with the minimum cdiVersion for its content."""
    names = [dev.name for dev in devices]
    if len(set(names)) != len(names):  # the runtime would reject the whole spec
        duplicates = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"CDI device names must be unique within a spec; duplicated: {', '.join(duplicates)}")
    rendered = []
    for dev in devices:
        edits = dev.edits if not dev.edits.is_empty() else ContainerEdits(env=[device_marker_env(driver, dev.device)])
        rendered.append({"name": dev.name, "containerEdits": render_edits(edits)})
    spec: dict[str, Any] = {"cdiVersion": "", "kind": cdi_kind(driver), "devices": rendered}
    if not claim_edits.is_empty():
        spec["containerEdits"] = render_edits(claim_edits)
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def parse_spec(data: bytes | str) -> dict[str, Any]:
    """A spec file's content as a dict with a devices list, or SpecUnreadable."""
    try:
        spec = json.loads(data)
    except ValueError as exc:
        raise SpecUnreadable(f"not JSON: {exc}") from exc
    if not isinstance(spec, dict) or not isinstance(spec.get("devices"), list):
        raise SpecUnreadable("not a CDI spec (no devices list)")
    return spec


def device_names(spec: dict[str, Any]) -> set[str]:
    return {str(d.get("name")) for d in spec.get("devices", []) if isinstance(d, dict)}


def claim_file_path(cdi_dir: Path, driver: str, claim_uid: str) -> str:
    """The claim file beside the claim's spec: a dot-name not ending in .json/.yaml, so runtimes skip it."""
    return node_file.child_path(cdi_dir, f".{_spec_name(driver, claim_uid)}{CLAIM_FILE_SUFFIX}")


def claim_uid_of_claim_file(path: Path, driver: str) -> str | None:
    return _uid_of_claim_file_name(path.name, f"{cdi_vendor(driver)}-{CDI_CLASS}_")


def our_claim_files(cdi_dir: Path, driver: str) -> dict[str, Path]:
    """Claim UID -> claim file, for every claim file of this driver in cdi_dir."""
    return _by_claim(cdi_dir, lambda path: claim_uid_of_claim_file(path, driver))


def write_claim_file(path: Path | str, claim_data: dict[str, Any]) -> None:
    """The claim's data, checksummed, written like a spec (atomic, not flushed)."""
    replace_file(path, signed_text(claim_data).encode(), durable=False, mode=0o600)


def read_spec_file(path: Path | str) -> bytes:
    """A spec's or claim file's bytes: a regular file, never a symlink or a pipe, at most MAX_FILE_BYTES."""
    return node_file.read_regular(path, MAX_FILE_BYTES)


def read_claim_file(path: Path | str) -> dict[str, Any]:
    """A claim file's data, checksum verified; FileNotFoundError without one, SpecUnreadable if damaged."""
    raw = read_spec_file(path)
    try:
        return verified_body(raw)
    except SignedJsonError as exc:
        raise SpecUnreadable(f"claim file {os.path.basename(path)}: {exc}") from exc


# --- version rules (reference section 5.2) --------------------------------------


def _all_edits(spec: dict[str, Any]) -> list[dict[str, Any]]:
    edits = [d.get("containerEdits") or {} for d in spec.get("devices", [])]
    edits.append(spec.get("containerEdits") or {})
    return edits


def minimum_version(spec: dict[str, Any]) -> str:
    """The lowest cdiVersion that accepts every feature the spec uses."""
    needed = (0, 3, 0)
    edits = _all_edits(spec)
    class_part = str(spec.get("kind", "")).partition("/")[2]

    def need(version: tuple[int, int, int]) -> None:
        nonlocal needed
        needed = max(needed, version)

    if any(m.get("type") for e in edits for m in e.get("mounts", [])):
        need((0, 4, 0))
    if any("hostPath" in n for e in edits for n in e.get("deviceNodes", [])):
        need((0, 5, 0))
    if any(str(d.get("name", ""))[:1].isdigit() for d in spec.get("devices", [])):
        need((0, 5, 0))
    if "annotations" in spec or any("annotations" in d for d in spec.get("devices", [])) or "." in class_part:
        need((0, 6, 0))
    if any("intelRdt" in e or "additionalGids" in e for e in edits):
        need((0, 7, 0))
    if any("netDevices" in e for e in edits):
        need((1, 1, 0))
    return ".".join(str(part) for part in needed)


# --- files -------------------------------------------------------------------


def write_spec_atomic(path: Path | str, spec: dict[str, Any]) -> str:
    """Write so that readers see either no file or the complete file, never a partial one.

    Atomic (temp file, rename) but not flushed to the device: a spec matters
    only within the boot it was written in. A process crash keeps it (page
    cache); a power loss or kernel crash reboots the node, which voids the
    checkpoint (boot ID), the kubelet prepares again, and start-up removes
    every spec without a record. Durability is the checkpoint's job: the
    PrepareCompleted record naming this spec is flushed before the kubelet
    gets an answer.

    Returns the text written (the checkpoint and the claim file keep it to rewrite a spec that went missing).
    """
    # Compact: runtimes parse it, and without indent json uses its C encoder.
    text = json.dumps(spec, separators=(",", ":"))
    write_text_atomic(path, text)
    return text


def write_text_atomic(path: Path | str, text: str) -> None:
    """A spec's text, written as write_spec_atomic describes (also used to restore a lost spec)."""
    # The temp name (see replace_file) does not end in .json/.yaml: runtimes watching the
    # directory ignore it; 0644 because runtimes may read it as another user.
    replace_file(path, text.encode(), durable=False, mode=0o644)


def remove_spec(path: Path | str) -> bool:
    """Delete a spec file; True if it existed. Not flushed, for the reason write_spec_atomic gives.

    A CDI directory that is missing or not a directory holds no spec (False), and so does a
    read-only one where the file is not there (unlink says EROFS before it looks); any other
    failure raises, so the caller keeps the claim's reservation.
    """
    try:
        os.unlink(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        if not os.path.lexists(path):
            return False
        raise
    return True
