"""Under umask 000 the daemon still creates nothing an unprivileged user can connect to or write in.

The daemon runs as a process of its own with umask 000; a forked child that dropped root for nobody then
tries to connect to both sockets and to create a file in every directory the driver made. Its parents are
made traversable for everyone (as /var/lib/kubelet and /var/run are), so each refusal comes from the
driver's own modes.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.node.example_backend import DRIVER
from tests.node.plugin.crash_support import DAEMON
from tests.unprivileged import as_nobody

from tests.support import eventually
from dra_driver.node import cdi

from dra_driver.common import file_modes
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.plugin.sockets import PluginPaths
from dra_driver.backend.interface import ClaimRef


pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")


def probes(sockets: list[Path], directories: list[Path]) -> Callable[[], dict[str, str]]:
    """What the caller gets for each socket (connect) and directory (create a file): "ok" or the system's words."""

    def run() -> dict[str, str]:
        outcome: dict[str, str] = {}
        for path in sockets:
            probe = socket.socket(socket.AF_UNIX)
            try:
                probe.connect(str(path))
                outcome[str(path)] = "ok"
            except OSError as exc:
                outcome[str(path)] = os.strerror(exc.errno or 0)
            finally:
                probe.close()
        for directory in directories:
            try:
                os.close(os.open(directory / "planted.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
                outcome[str(directory)] = "ok"
            except OSError as exc:
                outcome[str(directory)] = os.strerror(exc.errno or 0)
        return outcome

    return run


def test_nothing_the_daemon_creates_under_umask_000_lets_another_user_in(apiserver, short_tmp: Path):
    root = short_tmp
    root.chmod(0o755)
    (root / "boot_id").write_text("boot-1\n")
    (root / "state").mkdir(mode=0o700)  # the example backend's own journal, not the driver's
    # As a kubelet may leave them: its root and registry traversable; a CDI dir someone made world-writable.
    (root / "kubelet" / "plugins_registry").mkdir(parents=True)
    for made in (root / "kubelet", root / "kubelet" / "plugins_registry"):
        made.chmod(0o755)
    (root / "cdi").mkdir()
    (root / "cdi").chmod(0o777)
    paths = PluginPaths(root / "kubelet", DRIVER, state_dir=root / "run")
    stored = apiserver.store.put(allocated_claim_object("job", "default", DRIVER, "node-a", {"gpu": ["gpu-0"]}))
    ref = ClaimRef("default", "job", stored["metadata"]["uid"])

    daemon = subprocess.Popen([sys.executable, str(DAEMON), apiserver.url, str(root)], umask=0, stderr=subprocess.DEVNULL)
    try:
        eventually(paths.registration_socket.exists)
        conn = register(paths.registration_socket)
        assert conn.prepare([ref]).claims[ref.uid].error == ""
        conn.close()

        directories = [
            root / "kubelet" / "plugins",
            paths.plugin_dir,
            paths.registry_dir,
            root / "cdi",
            root / "run",
            paths.state_root,
            paths.checkpoint,
        ]
        outcome = as_nobody(probes(list(paths.sockets), directories))
        assert outcome == {str(p): "Permission denied" for p in [*paths.sockets, *directories]}

        # The modes themselves, exactly.
        assert [problem for e in paths.expectations(root / "cdi") if (problem := file_modes.check(e))] == []
        modes = {
            paths.dra_socket: file_modes.SOCKET,
            paths.registration_socket: file_modes.SOCKET,
            root / "run": file_modes.PRIVATE_DIR,
            paths.state_root: file_modes.PRIVATE_DIR,
            paths.checkpoint: file_modes.PRIVATE_DIR,
            paths.plugin_dir: file_modes.PLUGIN_DIR,
            root / "cdi": file_modes.CDI_DIR,  # group/other write removed from the existing one
            Path(cdi.spec_path(root / "cdi", DRIVER, ref.uid)): file_modes.SPEC_FILE,
            Path(cdi.claim_file_path(root / "cdi", DRIVER, ref.uid)): file_modes.PRIVATE_FILE,
            paths.checkpoint / f"{ref.uid}.json": file_modes.PRIVATE_FILE,
        }
        assert {str(p): oct(stat.S_IMODE(os.lstat(p).st_mode)) for p in modes} == {str(p): oct(m) for p, m in modes.items()}
        locks = [p for p in paths.state_root.rglob("*.lock")]
        assert locks and {oct(stat.S_IMODE(p.stat().st_mode)) for p in locks} == {oct(file_modes.PRIVATE_FILE)}
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(20)


NVIDIA = "gpu.nvidia.com"
SHARING_API = "resource.nvidia.com/v1beta1"


def _nvidia_claim(apiserver, name: str, device: str, sharing: dict | None = None, share: tuple[str, str] | None = None) -> ClaimRef:
    config = (
        [
            {
                "source": "FromClaim",
                "requests": ["gpu"],
                "opaque": {"driver": NVIDIA, "parameters": {"apiVersion": SHARING_API, "kind": "GpuConfig", "sharing": sharing}},
            }
        ]
        if sharing
        else None
    )
    obj = allocated_claim_object(name, "default", NVIDIA, "node-a", {"gpu": [device]}, device_class=NVIDIA, config=config)
    if share is not None:
        obj["status"]["allocation"]["devices"]["results"][0].update({"shareID": share[0], "consumedCapacity": {"memory": share[1]}})
    stored = apiserver.store.put(obj)
    return ClaimRef("default", name, stored["metadata"]["uid"])


def _mps_client_socket(path: Path, info: os.stat_result) -> bool:
    """The MPS control daemon's client socket (`pipe/control`, 0666 as the real daemon makes it): the claim's
    containers, running as any user, connect to it; connecting to a socket needs its write bit."""
    return stat.S_ISSOCK(info.st_mode) and path.name == "control" and path.parent.name == "pipe" and path.parents[2].name == "mps"


def test_no_path_the_daemon_creates_under_umask_000_is_writable_by_others_with_sharing(apiserver, short_tmp: Path):
    """`dra-driver run` (NVIDIA, simulated) under umask 000 with a pre-existing 0755 state dir, after claims with MPS,
    time-slicing and a consumable-memory share: nothing under the kubelet, state or CDI directories lets group or
    others write (intermediate directories such as nvidia/mps included, and whatever the MPS daemons make)."""
    root = short_tmp
    root.chmod(0o755)
    for made in (root / "kubelet" / "plugins_registry", root / "kubelet" / "plugins", root / "run", root / "cdi"):
        made.mkdir(parents=True)
        made.chmod(0o755)
    pod_uid = "4f1c2d3e-0000-4000-8000-0000000000aa"
    paths = PluginPaths(root / "kubelet", NVIDIA, pod_uid, state_dir=root / "run")
    claims = [
        _nvidia_claim(apiserver, "mps", "gpu-1", {"strategy": "MPS"}),
        _nvidia_claim(apiserver, "sliced", "gpu-2", {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}),
        _nvidia_claim(apiserver, "share", "gpu-0", share=("4f1c2d3e-0000-4000-8000-000000000001", "20Gi")),
    ]
    command = [sys.executable, "-m", "dra_driver.cli.main", "run", "--profile", "dgx-h100", "--vendors", "nvidia", "--consumable-gpu-memory",
               "--node-name", "node-a", "--api-server", apiserver.url, "--pod-uid", pod_uid, "--kubelet-dir", str(root / "kubelet"),
               "--state-dir", str(root / "run"), "--cdi-dir", str(root / "cdi"), "--simulated-root", str(root / "sim")]  # fmt: skip
    daemon = subprocess.Popen(command, umask=0, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        eventually(paths.registration_socket.exists, timeout=60)
        conn = register(paths.registration_socket)
        assert {uid: e.error for uid, e in conn.prepare(claims).claims.items()} == {c.uid: "" for c in claims}
        eventually(lambda: any((root / "run" / "ready").glob("*.json")), timeout=60)
        writable = {
            str(path): oct(stat.S_IMODE(info.st_mode))
            for path in [
                root / "kubelet",
                root / "run",
                root / "cdi",
                root / "sim",
                *(root / "kubelet").rglob("*"),
                *(root / "run").rglob("*"),
                *(root / "cdi").rglob("*"),
                *(root / "sim").rglob("*"),
            ]
            if not stat.S_ISLNK((info := os.lstat(path)).st_mode)
            and stat.S_IMODE(info.st_mode) & (stat.S_IWGRP | stat.S_IWOTH)
            and not _mps_client_socket(path, info)
            and not stat.S_ISCHR(info.st_mode)  # device nodes are 0666, as /dev/nvidia*
        }
        assert writable == {}, "writable by group or others:\n" + "\n".join(f"{mode} {path}" for path, mode in sorted(writable.items()))
        assert all(e.error == "" for e in conn.unprepare(claims).claims.values())
        conn.close()
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
