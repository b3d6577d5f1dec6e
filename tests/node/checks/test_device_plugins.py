"""Device plugins on the node: detection from every kubelet source, the default withholding, the split option."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.hostile_paths import HOSTILE, plant, returns_within
from tests.node.checks.fake_kubelet import PodResourcesState, bind_socket, pod_resources_server, write_checkpoint

from dra_driver.backend.hardware_profiles import load_profile
from dra_driver.node.metrics import Metrics
from dra_driver.model.device import Inventory
from dra_driver.node.checks.coexistence import CoexistenceSettings, DevicePluginGuard, Offer, normalize_id, withheld_devices
from dra_driver.node.checks.device_plugins import scan, vendor_of_resource
from dra_driver.node.checks.pod_resources import PodResourcesUnavailable, read_pod_resources
from dra_driver.backend.interface import BackendSettings

nvidia = pytest.importorskip("dra_driver_nvidia.backend")


@pytest.fixture(scope="module")
def mig_inventory() -> Iterator[Inventory]:
    """dgx-a100-mig: gpu-0..3 in MIG mode (MIG devices only), gpu-4..7 whole GPUs."""
    backend = nvidia.NvidiaBackend.from_profile(load_profile("dgx-a100-mig").sections["nvidia"], BackendSettings(node_name="node-a"))
    try:
        yield backend.discover()
    finally:
        backend.close()


def uuid_of(inventory: Inventory, name: str) -> str:
    return str(inventory.device(name).attributes["uuid"])


def names(inventory: Inventory, prefix: str) -> set[str]:
    return {d.name for d in inventory.devices if d.name.startswith(prefix)}


def test_resource_names_map_to_vendors():
    assert vendor_of_resource("nvidia.com/gpu") == "nvidia"
    assert vendor_of_resource("nvidia.com/mig-1g.5gb") == "nvidia"
    assert vendor_of_resource("amd.com/gpu") == "amd" and vendor_of_resource("amd.com/cpx_nps4") == "amd"
    assert vendor_of_resource("habana.ai/gaudi") == "gaudi"
    assert vendor_of_resource("example.com/gpu") is None and vendor_of_resource("nvidia.com/rdma") is None


def test_ids_normalize_across_forms():
    assert normalize_id("00000000:07:00.0") == normalize_id("0000:07:00.0") == normalize_id("07:00.0") == "0000:07:00.0"
    assert normalize_id("GPU-ABC::3") == "gpu-abc"  # a time-sliced replica is its GPU


def test_pod_resources_client_reads_a_real_socket(short_tmp: Path):
    sock = short_tmp / "pod-resources" / "kubelet.sock"
    state = PodResourcesState(allocatable={"nvidia.com/gpu": ["GPU-a", "GPU-b"]}, pods=[("ml", "trainer", "main", "nvidia.com/gpu", ["GPU-b"])])
    with pod_resources_server(sock, state):
        view = read_pod_resources(sock)
    assert view.allocatable == {"nvidia.com/gpu": {"GPU-a", "GPU-b"}}
    assert [(h.namespace, h.pod, h.container, h.device_id) for h in view.holders] == [("ml", "trainer", "main", "GPU-b")]
    assert state.calls == ["GetAllocatableResources", "List"]


def test_pod_resources_missing_or_dead_socket_is_a_clear_error(short_tmp: Path):
    with pytest.raises(PodResourcesUnavailable, match="does not exist"):
        read_pod_resources(short_tmp / "nope.sock")
    dead = short_tmp / "dead.sock"
    bind_socket(dead).close()  # the file stays, nobody listens
    with pytest.raises(PodResourcesUnavailable, match=str(dead)):
        read_pod_resources(dead, timeout=0.5)


def test_scan_merges_registrations_checkpoint_node_and_pod_resources(short_tmp: Path):
    kubelet = short_tmp / "kubelet"
    keep = [bind_socket(kubelet / "device-plugins" / "kubelet.sock"), bind_socket(kubelet / "device-plugins" / "habana.sock")]
    write_checkpoint(kubelet, {"amd.com/gpu": ["0000:03:00.0"]}, [("uid-1", "c", "amd.com/gpu", ["0000:03:00.0"])])
    node = {"status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "8", "nvidia.com/mig-1g.5gb": "0"}}}
    sock = kubelet / "pod-resources" / "kubelet.sock"
    with pod_resources_server(sock, PodResourcesState(allocatable={"nvidia.com/mig-3g.20gb": ["MIG-x"]})):
        report = scan(kubelet, sock, node)
    for s in keep:
        s.close()
    assert set(report.vendors) == {"nvidia", "amd", "gaudi"}
    assert report.vendors["gaudi"].sources == {"registration"}  # kubelet.sock is the kubelet's own, not a plugin
    amd = report.vendors["amd"]
    assert amd.sources == {"checkpoint"} and amd.advertised == {"0000:03:00.0"} and [h.device_id for h in amd.holders] == ["0000:03:00.0"]
    nv = report.vendors["nvidia"]
    assert nv.sources == {"node", "pod-resources"}
    assert nv.resources == {"nvidia.com/gpu", "nvidia.com/mig-3g.20gb"}  # mig-1g.5gb is at 0: a departed plugin
    assert report.problems == []


@pytest.mark.parametrize(
    "content",
    ['{"Data": {"RegisteredDevices": [1, 2]}}', "[1, 2]", "\udcff not json", "[" * 200_000 + "]" * 200_000],
    ids=["wrong-types", "not-an-object", "not-json", "nested-past-the-parser"],
)
def test_damaged_checkpoint_is_named_not_fatal(short_tmp: Path, content: str):
    kubelet = short_tmp / "kubelet"
    (kubelet / "device-plugins").mkdir(parents=True)
    (kubelet / "device-plugins" / "kubelet_internal_checkpoint").write_bytes(content.encode(errors="surrogateescape"))
    report = scan(kubelet, None)
    assert report.vendors == {} and "not a kubelet device-plugin checkpoint" in report.problems[0]


def test_no_device_plugin_withholds_nothing(mig_inventory: Inventory, short_tmp: Path):
    assert withheld_devices(mig_inventory, scan(short_tmp, None).for_vendor("nvidia"), Offer()) == {}


def test_advertised_gpus_and_their_partitions_are_withheld(mig_inventory: Inventory, short_tmp: Path):
    kubelet = short_tmp / "kubelet"
    gpu0_parent = str(mig_inventory.device(sorted(names(mig_inventory, "gpu-0-mig"))[0]).attributes["parentUUID"])
    write_checkpoint(kubelet, {"nvidia.com/gpu": [uuid_of(mig_inventory, "gpu-5"), gpu0_parent + "::2"]})
    withheld = withheld_devices(mig_inventory, scan(kubelet, None).for_vendor("nvidia"), Offer())
    assert set(withheld) == {"gpu-5"} | names(mig_inventory, "gpu-0-mig")
    assert "nvidia.com/gpu" in withheld["gpu-5"] and uuid_of(mig_inventory, "gpu-5") in withheld["gpu-5"]


def test_a_held_mig_device_withholds_its_whole_gpu(mig_inventory: Inventory, short_tmp: Path):
    mig = sorted(names(mig_inventory, "gpu-1-mig"))[0]
    kubelet = short_tmp / "kubelet"
    write_checkpoint(kubelet, {"nvidia.com/mig-3g.20gb": [uuid_of(mig_inventory, mig)]})
    withheld = withheld_devices(mig_inventory, scan(kubelet, None).for_vendor("nvidia"), Offer())
    assert set(withheld) == names(mig_inventory, "gpu-1-mig")


@pytest.mark.parametrize("advertised", [None, ["GPU-not-on-this-node"]])
def test_unknown_devices_withhold_the_whole_vendor(mig_inventory: Inventory, short_tmp: Path, advertised):
    kubelet = short_tmp / "kubelet"
    if advertised is None:  # only the Node's count: which GPUs is unknown
        report = scan(kubelet, None, {"status": {"allocatable": {"nvidia.com/gpu": "4"}}})
    else:
        write_checkpoint(kubelet, {"nvidia.com/gpu": advertised})
        report = scan(kubelet, None)
    withheld = withheld_devices(mig_inventory, report.for_vendor("nvidia"), Offer())
    assert set(withheld) == {d.name for d in mig_inventory.devices}
    assert ("does not say which" if advertised is None else "GPU-not-on-this-node") in withheld["gpu-4"]
    assert withheld_devices(mig_inventory, report.for_vendor("amd"), Offer()) == {}  # another vendor's plugin: none of ours


def test_split_offers_listed_devices_but_never_a_held_one(mig_inventory: Inventory, short_tmp: Path):
    kubelet = short_tmp / "kubelet"
    gpus = [uuid_of(mig_inventory, f"gpu-{i}") for i in (4, 5, 6, 7)]
    pci7 = str(mig_inventory.device("gpu-7").attributes["resource.kubernetes.io/pciBusID"])
    write_checkpoint(kubelet, {"nvidia.com/gpu": gpus}, [("uid-9", "main", "nvidia.com/gpu", [gpus[2]])])
    offer = Offer.parse(f"gpu-4, {gpus[2]},{pci7.replace('0000:', '00000000:')}")  # name, UUID, PCI bus ID in NVML's form
    withheld = withheld_devices(mig_inventory, scan(kubelet, None).for_vendor("nvidia"), offer)
    assert set(withheld) == {"gpu-5", "gpu-6"}
    assert withheld["gpu-6"].startswith("held by device-plugin pod")


def test_guard_filters_counts_and_republishes_on_change(mig_inventory: Inventory, short_tmp: Path):
    kubelet = short_tmp / "kubelet"
    now = [0.0]
    metrics = Metrics()
    guard = DevicePluginGuard(CoexistenceSettings(kubelet, None, rescan_interval=30), metrics, clock=lambda: now[0])
    changes: list[str] = []
    guard.subscribe("nvidia", lambda: changes.append("nvidia"))
    assert guard.filter("nvidia", mig_inventory) is mig_inventory
    write_checkpoint(kubelet, {"nvidia.com/gpu": [uuid_of(mig_inventory, "gpu-4")]})
    assert guard.refusal("nvidia", ["gpu-4"]) is None and changes == []  # the last scan is still fresh
    now[0] = 31.0
    published = guard.filter("nvidia", mig_inventory)
    assert "gpu-4" not in {d.name for d in published.devices} and len(published.devices) == len(mig_inventory.devices) - 1
    assert changes == ["nvidia"]
    assert metrics.registry.get_sample_value("dra_driver_withheld_devices", {"driver": "gpu.nvidia.com"}) == 1
    assert "withheld" in (guard.refusal("nvidia", ["gpu-5", "gpu-4"]) or "")


def test_refusal_asks_the_kubelet_live_for_holders(mig_inventory: Inventory, short_tmp: Path):
    """A split node: gpu-4 offered to this driver by mistake while a device-plugin pod got it a moment ago."""
    kubelet = short_tmp / "kubelet"
    sock = kubelet / "pod-resources" / "kubelet.sock"
    gpu4 = uuid_of(mig_inventory, "gpu-4")
    state = PodResourcesState(allocatable={"nvidia.com/gpu": [gpu4]})
    with pod_resources_server(sock, state):
        guard = DevicePluginGuard(CoexistenceSettings(kubelet, sock, Offer.parse("gpu-4"), rescan_interval=3600))
        assert guard.observe("nvidia", mig_inventory) == {}
        assert guard.refusal("nvidia", ["gpu-4"]) is None
        state.pods.append(("ml", "dp-pod", "main", "nvidia.com/gpu", [gpu4]))
        problem = guard.refusal("nvidia", ["gpu-4"])
        assert problem is not None and "held by device-plugin pod ml/dp-pod" in problem
    # The kubelet cannot be asked any more while a device plugin is known: refuse rather than guess.
    problem = guard.refusal("nvidia", ["gpu-4"])
    assert problem is not None and "cannot be read" in problem


def test_pod_resources_wire_identity():
    """Package, service, method paths and field numbers of k8s.io/kubelet/pkg/apis/podresources/v1."""
    from dra_driver.api.podresources.v1 import api_pb2 as pr

    def numbers(message) -> dict[str, int]:
        return {f.name: f.number for f in message.DESCRIPTOR.fields}

    service = pr.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert pr.DESCRIPTOR.package == "v1"
    assert {f"/{service.full_name}/{m.name}" for m in service.methods} == {
        "/v1.PodResourcesLister/List",
        "/v1.PodResourcesLister/GetAllocatableResources",
    }
    assert numbers(pr.ListPodResourcesResponse) == {"pod_resources": 1}
    assert numbers(pr.PodResources) == {"name": 1, "namespace": 2, "containers": 3}
    assert numbers(pr.ContainerResources) == {"name": 1, "devices": 2}
    assert numbers(pr.ContainerDevices) == {"resource_name": 1, "device_ids": 2}
    assert numbers(pr.AllocatableResourcesResponse) == {"devices": 1}
    assert numbers(pr.ListPodResourcesRequest) == {} and numbers(pr.AllocatableResourcesRequest) == {}


def test_run_flags_reach_the_guard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import argparse

    from dra_driver.cli.run import add_daemon_arguments
    from dra_driver.node.assembly import coexistence_settings

    monkeypatch.delenv("DRA_DRIVER_OFFER_DEVICES", raising=False)
    parser = argparse.ArgumentParser()
    add_daemon_arguments(parser)
    settings = coexistence_settings(parser.parse_args(["--kubelet-dir", str(tmp_path), "--offer-devices", "gpu-4, GPU-ABC"]))
    assert settings.pod_resources_socket == tmp_path / "pod-resources" / "kubelet.sock"
    assert settings.offer.keys == {"gpu-4", "gpu-abc"}
    other = coexistence_settings(parser.parse_args(["--pod-resources-socket", str(tmp_path / "pr.sock")]))
    assert other.pod_resources_socket == tmp_path / "pr.sock" and other.offer.keys == frozenset()


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_pipe_or_link_at_the_kubelet_checkpoint_is_named_without_waiting(mig_inventory: Inventory, short_tmp: Path, kind: str):
    """A FIFO there blocked the scan in open() while holding the guard's lock: no slices, every prepare timed out."""
    kubelet = short_tmp / "kubelet"
    checkpoint = kubelet / "device-plugins" / "kubelet_internal_checkpoint"
    plant(checkpoint, kind)
    report = returns_within(lambda: scan(kubelet, None), checkpoint)
    assert report.vendors == {} and len(report.problems) == 1
    assert report.problems[0].startswith(f"{checkpoint}: is ") and "remove it" in report.problems[0]
    guard = DevicePluginGuard(CoexistenceSettings(kubelet, None))
    assert returns_within(lambda: guard.refusal("nvidia", ["gpu-4"]), checkpoint) is None


def test_a_slow_kubelet_never_holds_the_lock_prepare_needs(mig_inventory: Inventory, short_tmp: Path):
    """A rescan waiting on the kubelet (PodResources) runs outside the guard's lock: meanwhile the publisher and
    prepare are answered from the last scan instead of waiting for the kubelet's answer or the call's timeout."""
    kubelet = short_tmp / "kubelet"
    sock = kubelet / "pod-resources" / "kubelet.sock"
    state = PodResourcesState(allocatable={"nvidia.com/gpu": [uuid_of(mig_inventory, "gpu-4")]})
    now = [0.0]
    with pod_resources_server(sock, state):
        guard = DevicePluginGuard(CoexistenceSettings(kubelet, sock, rescan_interval=30), clock=lambda: now[0])
        assert set(guard.observe("nvidia", mig_inventory)) == {"gpu-4"}
        state.hold = threading.Event()
        now[0] = 31.0
        rescan = threading.Thread(target=guard.poll, daemon=True)
        rescan.start()
        while state.calls.count("GetAllocatableResources") < 2:  # the rescan is waiting on the kubelet
            time.sleep(0.01)
        withheld = guard.observe("nvidia", mig_inventory)  # waited for the rescan's timeout before the fix
        state.hold.set()
        rescan.join(10)
        assert set(withheld) == {"gpu-4"}
        # The rescan was still waiting when observe answered: it got the kubelet's answer, not a timeout.
        assert not rescan.is_alive() and guard.report().problems == []
