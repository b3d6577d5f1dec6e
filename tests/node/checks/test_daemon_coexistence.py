"""The daemon beside a device plugin: withheld devices are not published and never prepared; the rest work."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.node.checks.fake_kubelet import PodResourcesState, pod_resources_server
from tests.node.conftest import make_settings

from dra_driver.node.daemon import Daemon
from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.simulation import api_server as sim_apiserver
from dra_driver.kube.claims import ClaimReader
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.checks.coexistence import WITHHELD_ANNOTATION, CoexistenceSettings, DevicePluginGuard
from dra_driver.node.plugin.kubelet_client import register
from dra_driver.node.publisher.daemon_adapter import publisher_factory
from dra_driver.backend.interface import BackendSettings, ClaimRef
from tests.node.publisher.conftest import eventually

nvidia = pytest.importorskip("dra_driver_nvidia.backend")
DRIVER = "gpu.nvidia.com"


def test_device_plugin_gpus_are_neither_published_nor_prepared(short_tmp: Path):
    settings = make_settings(short_tmp)
    sock = settings.kubelet_dir / "pod-resources" / "kubelet.sock"
    backend = nvidia.NvidiaBackend.from_profile(load_profile("dgx-h100").sections["nvidia"], BackendSettings(node_name="node-a"))
    inventory = backend.discover()
    gpu2 = str(inventory.device("gpu-2").attributes["uuid"])
    state = PodResourcesState(allocatable={"nvidia.com/gpu": [gpu2]}, pods=[("ml", "legacy", "main", "nvidia.com/gpu", [gpu2])])
    with sim_apiserver.SimApiServer() as server, pod_resources_server(sock, state):
        server.add_node("node-a")
        clock = [0.0]
        guard = DevicePluginGuard(CoexistenceSettings(settings.kubelet_dir, sock), clock=lambda: clock[0])
        api = server.json_api()
        daemon = Daemon([backend], ClaimReader(api), settings, publisher_factory=publisher_factory(api, "node-a", guard=guard), guard=guard)
        try:
            assert daemon.start().running == [DRIVER]
            publisher = daemon.plugins[DRIVER].publisher
            assert publisher is not None and publisher.publishing.wait(5)
            assert publisher.inner.publisher.wait_synced(timeout=10)
            published = {d["name"] for s in server.objects("ResourceSlice") for d in s["spec"].get("devices", [])}
            assert "gpu-2" not in published and {"gpu-0", "gpu-1", "gpu-3"} <= published

            def claim(name: str, device: str) -> ClaimRef:
                stored = server.store.put(allocated_claim_object(name, "default", DRIVER, "node-a", {"gpu": [device]}))
                return ClaimRef("default", name, stored["metadata"]["uid"])

            taken, free = claim("takes-dp-gpu", "gpu-2"), claim("fine", "gpu-3")
            conn = register(daemon.plugins[DRIVER].paths.registration_socket)
            answer = conn.prepare([taken, free]).claims
            assert "gpu-2" in answer[taken.uid].error and "ml/legacy" in answer[taken.uid].error
            assert answer[free.uid].error == "" and answer[free.uid].devices  # the other claim of the batch is unaffected
            assert not list(settings.cdi_dir.glob(f"*{taken.uid}*"))  # nothing prepared for the refused claim
            assert daemon.plugins[DRIVER].service.checkpoint_record(taken.uid) is None
            assert conn.unprepare([free]).claims[free.uid].error == ""
            conn.close()
            assert daemon.metrics.registry.get_sample_value("dra_driver_withheld_devices", {"driver": DRIVER}) == 1
            notes = {s["metadata"].get("annotations", {}).get(WITHHELD_ANNOTATION) for s in server.objects("ResourceSlice")}
            assert len(notes) == 1 and "gpu-2: held by device-plugin pod ml/legacy" in notes.pop()  # every slice says it

            # The device plugin goes away: the next rescan publishes gpu-2 again and drops the note.
            state.allocatable.clear()
            state.pods.clear()
            clock[0] += 60
            guard.poll()
            eventually(lambda: "gpu-2" in {d["name"] for s in server.objects("ResourceSlice") for d in s["spec"].get("devices", [])})
            eventually(lambda: not any(WITHHELD_ANNOTATION in s["metadata"].get("annotations", {}) for s in server.objects("ResourceSlice")))
            assert daemon.metrics.registry.get_sample_value("dra_driver_withheld_devices", {"driver": DRIVER}) == 0
        finally:
            daemon.stop()
            backend.close()
