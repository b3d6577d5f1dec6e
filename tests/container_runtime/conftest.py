"""A real OCI runtime applying our CDI specs: podman (its CDI support is the CNCF library containerd and CRI-O use).

Needs root, podman, runc and busybox-static (`apt-get install podman runc busybox-static`), and a machine where
mknod and a plain container work (not an unprivileged CI container); otherwise every test here skips with the
reason in the summary. Known to work: podman 4.3 with runc, vfs storage and cgroupfs
(crun refuses hybrid cgroups). Everything podman stores goes to a private temp root; podman 4.3 reads specs only
from /etc/cdi and /var/run/cdi, so the specs the daemon writes (into its own temp CDI dir) are copied into
/etc/cdi under unique names and removed afterwards. Device nodes are made with mknod under a temp dev root,
all with /dev/null's numbers: nothing a container does with them can reach hardware.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dra_driver.node.daemon import Daemon
from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.simulation import api_server as sim_apiserver
from dra_driver.kube.claims import ClaimReader
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.driver import PluginSettings
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.backend.registry import open_backends
from dra_driver.backend.interface import BackendSettings, ClaimRef

ETC_CDI = Path("/etc/cdi")
NODE = "node-a"
IMAGE = "localhost/dra-driver-cdi-test:busybox"
APPLETS = ("sh", "cat", "env", "find", "test", "echo", "ls")
RUN_FLAGS = ("--runtime", "runc", "--net=none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
NULL_DEVICE = os.makedev(1, 3)


def _busybox() -> Path | None:
    for candidate in ("/bin/busybox", "/usr/bin/busybox"):
        path = Path(candidate)
        if path.is_file() and b"ld-linux" not in path.read_bytes()[:4096]:
            return path  # static: no interpreter named in its first page
    return None


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (podman run with device nodes, mknod, /etc/cdi)"
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt-get install podman runc busybox-static)"
    if _busybox() is None:
        return "static busybox not installed (apt-get install busybox-static)"
    return None


@dataclass
class Podman:
    """podman on a private storage root, with a busybox image whose env says NVIDIA_VISIBLE_DEVICES=all (as CUDA images do)."""

    root: Path
    published: list[Path] = field(default_factory=list)

    @property
    def base(self) -> list[str]:
        # Own storage, run and libpod tmp dirs: runs from several checkouts at once never share state.
        return ["podman", "--root", str(self.root / "storage"), "--runroot", str(self.root / "run"),
                "--tmpdir", str(self.root / "tmp"), "--storage-driver=vfs", "--cgroup-manager=cgroupfs"]  # fmt: skip

    def import_image(self) -> None:
        tree = self.root / "image"
        (tree / "bin").mkdir(parents=True)
        busybox = _busybox()
        assert busybox is not None
        shutil.copy2(busybox, tree / "bin/busybox")
        for applet in APPLETS:
            (tree / "bin" / applet).symlink_to("busybox")
        tar = self.root / "image.tar"
        subprocess.run(["tar", "-C", str(tree), "-cf", str(tar), "."], check=True)
        subprocess.run([*self.base, "import", "--change", "ENV NVIDIA_VISIBLE_DEVICES=all", str(tar), IMAGE],
                       check=True, capture_output=True, timeout=120)  # fmt: skip

    def publish(self, spec_files: Sequence[Path]) -> None:
        """Copy specs into /etc/cdi under unique names (removed by unpublish)."""
        ETC_CDI.mkdir(parents=True, exist_ok=True)
        for spec in spec_files:
            target = ETC_CDI / f"dra-driver-test-{uuid.uuid4().hex[:12]}-{spec.name}"
            shutil.copyfile(spec, target)
            self.published.append(target)

    def unpublish(self) -> None:
        for path in self.published:
            path.unlink(missing_ok=True)
        self.published.clear()

    def cannot_run_here(self) -> str | None:
        """Why containers cannot run on this machine at all (an unprivileged CI container, say), or None.

        Checked without any CDI device, so a failure here never hides a problem with our specs."""
        try:
            probe = self.root / "probe-node"
            os.mknod(probe, 0o600 | stat.S_IFCHR, NULL_DEVICE)
            probe.unlink()
        except OSError as exc:
            return f"mknod is not allowed here ({exc.strerror})"
        done = subprocess.run([*self.base, "run", "--rm", *RUN_FLAGS, IMAGE, "sh", "-c", ":"], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            return f"podman cannot run a plain container here: {done.stderr.strip().splitlines()[-1:]}"
        return None

    def run(self, cdi_ids: Sequence[str], script: str) -> str:
        devices = [arg for cdi_id in cdi_ids for arg in ("--device", cdi_id)]
        done = subprocess.run([*self.base, "run", "--rm", *RUN_FLAGS, *devices, IMAGE, "sh", "-c", script],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, f"podman run failed ({done.returncode}): {done.stderr}"
        return done.stdout


@pytest.fixture(scope="session")
def podman() -> Iterator[Podman]:
    reason = _missing()
    if reason:
        pytest.skip(f"container runtime tests: {reason}")
    root = Path(tempfile.mkdtemp(prefix="dra-podman-", dir="/tmp"))
    runtime = Podman(root)
    try:
        runtime.import_image()
        reason = runtime.cannot_run_here()
        if reason:
            pytest.skip(f"container runtime tests: {reason}")
        yield runtime
    finally:
        runtime.unpublish()
        subprocess.run([*runtime.base, "rmi", "-a", "-f"], capture_output=True, timeout=120)
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class PreparedDevice:
    driver: str
    request_names: list[str]
    cdi_ids: list[str]


@dataclass
class ProfileNode:
    """The real daemon on a simulated profile; claims are prepared over its sockets like the kubelet does."""

    root: Path
    server: sim_apiserver.SimApiServer
    daemon: Daemon
    dev_root: Path
    prepared: dict[str, list[PreparedDevice]] = field(default_factory=dict)  # claim name -> devices

    def prepare(self, name: str, driver: str, devices: dict[str, list[str]], config: list[dict[str, Any]] | None = None) -> None:
        stored = self.server.store.put(allocated_claim_object(name, "default", driver, NODE, devices, config=config))
        ref = ClaimRef("default", name, stored["metadata"]["uid"])
        conn = register(self.daemon.plugins[driver].paths.registration_socket)
        try:
            entry = conn.prepare([ref]).claims[ref.uid]
        finally:
            conn.close()
        assert entry.error == "", entry.error
        self.prepared[name] = [PreparedDevice(driver, list(d.request_names), list(d.cdi_device_ids)) for d in entry.devices]
        self._make_nodes()

    def cdi_ids(self, *references: tuple[str, str | None]) -> list[str]:
        """What the kubelet passes a container naming (claim, request) pairs: the IDs of every device whose
        request_names is empty or holds the request, or of all devices when no request is named."""
        ids: list[str] = []
        for claim, request in references:
            for device in self.prepared[claim]:
                if request is None or not device.request_names or request in device.request_names:
                    ids += [i for i in device.cdi_ids if i not in ids]
        return ids

    def spec_files(self) -> list[Path]:
        return sorted((self.root / "cdi").glob("*.json"))

    def specs(self) -> list[dict[str, Any]]:
        return [json.loads(path.read_text()) for path in self.spec_files()]

    def _make_nodes(self) -> None:
        """mknod every device node the specs name under our dev root (a runtime reads type and numbers from it)."""
        for spec in self.specs():
            edits = [d["containerEdits"] for d in spec["devices"]] + [spec.get("containerEdits") or {}]
            for node in (n for e in edits for n in e.get("deviceNodes", [])):
                host = Path(node.get("hostPath") or node["path"])
                assert host.is_relative_to(self.dev_root), f"device node outside the test dev root: {host}"
                if not host.exists():
                    host.parent.mkdir(parents=True, exist_ok=True)
                    os.mknod(host, 0o666 | stat.S_IFCHR, NULL_DEVICE)


@contextmanager
def profile_node(profile: str, partitioning: str = "static", **backend: Any) -> Iterator[ProfileNode]:
    root = Path(tempfile.mkdtemp(prefix="dra-ctr-", dir="/tmp"))
    dev_root = root / "dev"
    dev_root.mkdir()
    (root / "boot_id").write_text("boot-1\n")
    settings = PluginSettings(
        node_name=NODE, kubelet_dir=root / "kubelet", cdi_dir=root / "cdi", state_dir=root / "run", boot_id_path=root / "boot_id",
        prepare_workers=2, grpc_workers=4,
    )  # fmt: skip
    backend_settings = BackendSettings(
        node_name=NODE, partitioning=partitioning, dev_root=dev_root, state_dir=root / "state", **backend  # type: ignore[arg-type]
    )
    opened = open_backends(backend_settings, load_profile(profile))
    assert opened.backends, [str(p) for p in opened.unavailable]
    with sim_apiserver.SimApiServer() as server:
        daemon = Daemon(opened.backends, ClaimReader(server.json_api()), settings)
        daemon.start()
        try:
            yield ProfileNode(root, server, daemon, dev_root)
        finally:
            daemon.stop()
            for backend in opened.backends:
                backend.close()
            shutil.rmtree(root, ignore_errors=True)
