"""The node daemon publishes each backend's pool and turns its health events into taints."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from dra_driver.node.daemon import Daemon
from dra_driver.kube.claims import ClaimReader
from dra_driver.kube.client import make_json_api
from dra_driver.simulation.api_server import ServerOptions, SimApiServer
from dra_driver.model.device import CounterConsumption, CounterSet, Device, Inventory
from dra_driver.node.plugin.driver import PluginSettings
from dra_driver.node.publisher.daemon_adapter import publisher_factory
from dra_driver.backend.interface import AllocatedDevice, BackendSettings, ClaimRef, HealthEvent, PreparedClaim, VendorBackend
from tests.node.publisher.conftest import FAST, NODE, device_names, eventually, slices


class ToyBackend(VendorBackend):
    """Two GPUs; with dynamic partitioning each also has a half partition sharing its counters."""

    vendor = "toy"

    def __init__(self, driver: str, settings: BackendSettings) -> None:
        self.driver_name = driver  # type: ignore[misc]
        self.settings = settings
        self.health: queue.Queue[HealthEvent] = queue.Queue()

    @classmethod
    def from_host(cls, settings: BackendSettings) -> VendorBackend:
        raise NotImplementedError

    @classmethod
    def from_profile(cls, section: Mapping[str, Any], settings: BackendSettings) -> VendorBackend:
        raise NotImplementedError

    def discover(self) -> Inventory:
        if self.settings.partitioning == "static":
            return Inventory(driver=self.driver_name, devices=[Device(name=f"gpu-{i}") for i in range(2)])
        sets = [CounterSet(f"gpu-{i}", {"memory": "2"}) for i in range(2)]
        devices = [Device(name=f"gpu-{i}", consumes_counters=[CounterConsumption(f"gpu-{i}", {"memory": "2"})]) for i in range(2)]
        devices += [Device(name=f"gpu-{i}-half", consumes_counters=[CounterConsumption(f"gpu-{i}", {"memory": "1"})]) for i in range(2)]
        return Inventory(driver=self.driver_name, devices=devices, counter_sets=sets)

    def validate_config(self, parameters: Mapping[str, Any]) -> BaseModel:
        return BaseModel()

    def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> PreparedClaim:
        return PreparedClaim(devices=[])

    def unprepare(self, claim: ClaimRef, state: Mapping[str, Any]) -> None:
        return None

    def watch_health(self, stop: threading.Event) -> Iterator[HealthEvent]:
        while not stop.is_set():
            try:
                yield self.health.get(timeout=0.05)
            except queue.Empty:
                continue


def make_daemon(root: Path, server: SimApiServer, backends: list[VendorBackend]) -> Daemon:
    (root / "boot_id").write_text("boot-1\n")
    settings = PluginSettings(
        node_name=NODE, kubelet_dir=root / "kubelet", cdi_dir=root / "cdi", boot_id_path=root / "boot_id", prepare_workers=2, grpc_workers=8
    )
    api = make_json_api(server.url)
    return Daemon(backends, ClaimReader(api), settings, publisher_factory=publisher_factory(api, NODE, FAST))


def test_daemon_publishes_every_driver_and_taints_unhealthy_devices(short_tmp: Path) -> None:
    with SimApiServer() as server:
        server.add_node(NODE)
        gpus = ToyBackend("gpu.example.com", BackendSettings(node_name=NODE))
        nics = ToyBackend("accel.example.com", BackendSettings(node_name=NODE))
        daemon = make_daemon(short_tmp, server, [gpus, nics])
        status = daemon.start()
        try:
            assert sorted(status.running) == ["accel.example.com", "gpu.example.com"]
            for driver in status.running:
                eventually(lambda d=driver: device_names(slices(server, driver=d)) == {"gpu-0", "gpu-1"}, what=f"{driver} published")
            before = server.writes()
            gpus.health.put(HealthEvent(device="gpu-1", healthy=False, reason="XID 79"))
            eventually(lambda: any(d.get("taints") for o in slices(server) for d in o["spec"]["devices"]), what="taint published")
            assert server.writes() - before == 1
            assert not any(d.get("taints") for o in slices(server, driver="accel.example.com") for d in o["spec"]["devices"])
        finally:
            daemon.stop()


def test_daemon_falls_back_to_static_partitions_when_counters_are_dropped(short_tmp: Path) -> None:
    with SimApiServer(ServerOptions(partitionable_devices=False)) as server:
        server.add_node(NODE)
        backend = ToyBackend("gpu.example.com", BackendSettings(node_name=NODE, partitioning="dynamic"))
        daemon = make_daemon(short_tmp, server, [backend])
        daemon.start()
        try:
            eventually(lambda: device_names(slices(server)) == {"gpu-0", "gpu-1"}, what="static publish")
            assert backend.settings.partitioning == "static"  # prepare now agrees with what is published
        finally:
            daemon.stop()
