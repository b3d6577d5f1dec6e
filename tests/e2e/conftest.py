"""The e2e tier: the driver under a real kube-apiserver, kube-scheduler, kubelet and containerd (docs/e2e.md).

Every test here is marked `e2e` and skips, with the reason, unless `DRA_KIT` names an installed loopback kit
and the tests run as root: a plain `pytest` stays green and fast. With a kit, the session starts a fresh control
plane and node-1 (the driver runs there as a host process), node-2 only for the DaemonSet tests, and stops all
of it at the end, whatever happened.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .kit import IMAGE, KIT_ENV, Kit, kit_problem
from tests.support import eventually

NAMESPACE = "e2e"
REPO = Path(__file__).resolve().parents[2]
IMAGE_TAR_ENV = "DRA_E2E_IMAGE_TAR"  # scripts/build_image.sh's dra-driver-image.tar, imported into each node


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    problem = kit_problem(os.environ.get(KIT_ENV))
    for item in items:
        if here not in Path(str(item.fspath)).parents:
            continue
        item.add_marker(pytest.mark.e2e)
        if problem:
            item.add_marker(pytest.mark.skip(reason=problem))


@pytest.fixture(scope="session")
def kit() -> Kit:
    return Kit(Path(os.environ[KIT_ENV]))


@pytest.fixture(scope="session")
def cluster(kit: Kit) -> Iterator[Kit]:
    """A fresh control plane with the shipped DeviceClasses and the test namespace; stopped at the end."""
    kit.script("up.sh", "--fresh")
    try:
        kit.apply_k(REPO / "deviceclasses")
        kit.kubectl("create", "namespace", NAMESPACE)
        yield kit
    finally:
        _quiet(kit, "down.sh")


def _quiet(kit: Kit, script: str, *args: str) -> None:
    try:
        kit.script(script, *args)
    except (AssertionError, subprocess.TimeoutExpired) as err:
        print(f"e2e cleanup: {script} failed: {err}", file=sys.stderr)


def import_image(kit: Kit, node: str) -> None:
    """The driver image into a node's containerd (k8s.io namespace): $DRA_E2E_IMAGE_TAR when given (always, so a
    rebuilt image replaces the one a node kept), else the one already there."""
    home = kit.home if node == "node-1" else kit.cri_home
    ctr = [str(kit.home / "bin" / "ctr"), "--address", str(home / f"containerd-{node}" / "containerd.sock"), "-n", "k8s.io"]
    tar = os.environ.get(IMAGE_TAR_ENV)
    if tar and Path(tar).is_file():
        subprocess.run([*ctr, "images", "import", tar], check=True, capture_output=True, timeout=600)
        return
    listed = subprocess.run([*ctr, "images", "ls", "-q"], capture_output=True, text=True, timeout=60)
    if IMAGE not in listed.stdout.split():
        pytest.skip(f"the driver image {IMAGE} is not on {node} and ${IMAGE_TAR_ENV} names no image tar (scripts/build_image.sh)")


@pytest.fixture(scope="session")
def node1(cluster: Kit) -> Iterator[Kit]:
    cluster.script("kubelet-up.sh", "--fresh")
    try:
        import_image(cluster, "node-1")
        yield cluster
    finally:
        _quiet(cluster, "kubelet-down.sh")


@pytest.fixture(scope="session")
def node2(cluster: Kit) -> Iterator[Kit]:
    cluster.script("node2-up.sh", "--fresh")
    try:
        import_image(cluster, "node-2")
        yield cluster
    finally:
        _quiet(cluster, "node2-down.sh")


@dataclass
class HostDriver:
    """`dra-driver run` on node-1 as a host process: the node's kubelet dir, CDI dir and the kit's kubeconfig."""

    kit: Kit
    profile: str
    work: Path
    extra: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None
    drivers: tuple[str, ...] = ()
    starts: int = 0
    log_paths: list[Path] = field(default_factory=list)
    registered_before: dict[str, int] = field(default_factory=dict)

    @property
    def simulated_root(self) -> Path:
        return self.work / "sim"

    @property
    def state_dir(self) -> Path:
        return self.work / "state"

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "dra_driver.cli.main", "-v", "run", "--profile", self.profile,
            "--simulated-root", str(self.simulated_root), "--node-name", "node-1",
            "--kubelet-dir", str(self.kit.node1_kubelet_dir), "--cdi-dir", str(self.kit.node1_cdi_dir),
            "--kubeconfig", str(self.kit.kubeconfig), "--state-dir", str(self.state_dir),
            "--pod-resources-socket", str(self.kit.node1_kubelet_dir / "pod-resources" / "kubelet.sock"), *self.extra,
        ]  # fmt: skip

    def registrations(self, driver: str) -> int:
        """`Registered DRA plugin` lines of `driver` in the running kubelet's log."""
        return len(self.kit.kubelet_log_lines("node-1", rf'"Registered DRA plugin".*driverName="{re.escape(driver)}"'))

    def start(self) -> None:
        self.registered_before = {name: self.registrations(name) for name in self.drivers}
        self.starts += 1
        log = self.work / f"driver-{self.starts}.log"
        self.log_paths.append(log)
        tmp = self.work / f"tmp-{self.starts}"  # a pod's private /tmp: the simulation's scratch dirs
        tmp.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as out:
            self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "TMPDIR": str(tmp)}, cwd=REPO)

    def wait_published(self, driver: str, timeout: float = 120) -> list[dict[str, Any]]:
        def published() -> list[dict[str, Any]] | None:
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"dra-driver run exited {self.process.returncode}: {self.tail()}")
            slices = self.kit.slices("node-1", driver)
            return slices if slices and all(s["spec"].get("devices") or s["spec"].get("sharedCounters") for s in slices) else None

        slices = eventually(published, f"{driver} slices of node-1", timeout, step=0.25)
        # Slices can be out before the kubelet's plugin watcher (1 s period) has registered the new instance;
        # a pod scheduled in that second fails its first prepare ("not registered") and waits for the retry.
        eventually(
            lambda: self.registrations(driver) > self.registered_before.get(driver, 0), f"the kubelet to register {driver}", timeout, step=0.25
        )
        return slices

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self.process = None

    def stop(self) -> int:
        if self.process is None:
            return 0
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(timeout=30)
        self.process = None
        return code

    def tail(self, lines: int = 30) -> str:
        if not self.log_paths or not self.log_paths[-1].exists():
            return ""
        return "\n".join(self.log_paths[-1].read_text(errors="replace").splitlines()[-lines:])


def start_host_driver(kit: Kit, profile: str, work: Path, drivers: tuple[str, ...], *extra: str) -> HostDriver:
    driver = HostDriver(kit, profile, work, tuple(extra), drivers=drivers)
    driver.start()
    for name in drivers:
        driver.wait_published(name)
    return driver


def stop_host_driver(kit: Kit, driver: HostDriver) -> None:
    """Workloads gone first (the driver unprepares them), then the driver, then its slices (the kubelet would
    delete them ~30 s after deregistration; a test does not wait for that)."""
    kit.kubectl("-n", NAMESPACE, "delete", "pods", "--all", "--wait=true", "--timeout=120s", check=False, timeout=180)
    driver.stop()
    for name in driver.drivers:
        for item in kit.slices("node-1", name):
            kit.kubectl("delete", "resourceslice", item["metadata"]["name"], "--wait=false", check=False)


@pytest.fixture
def e2e_work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A short host path for one driver's state and simulated root (containerd must see the device nodes)."""
    work = Path(tmp_path_factory.mktemp("e2e", numbered=True))
    yield work
    shutil.rmtree(work, ignore_errors=True)


def wait_seconds(seconds: float) -> None:
    """A pause the real components need (the kubelet's 1 s plugin watcher, informers), never an assertion."""
    time.sleep(seconds)
