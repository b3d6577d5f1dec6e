"""Static partitions (a GPU already in CPX/NPS4) and dynamic partitions (counters)."""

from __future__ import annotations

import itertools
from collections import defaultdict
from decimal import Decimal

from dra_driver.model import render_pool, validate_slices
from dra_driver.model.device import Inventory

from dra_driver_amd.modes import modes_from_caps


def test_static_cpx_nps4_publishes_each_partition_with_its_parent(open_backend):
    inventory = open_backend("mi300x-cpx").discover()
    assert len(inventory.devices) == 64
    assert not inventory.counter_sets
    renders = sorted(d.attributes["renderIndex"] for d in inventory.devices)
    assert renders == list(range(128, 192))
    by_parent = defaultdict(list)
    for device in inventory.devices:
        a = device.attributes
        assert a["type"] == "amdgpu-partition"
        assert a["partitionProfile"] == "cpx_nps4"
        assert a["dra-driver.io/partition"] is True
        assert device.name == f"gpu-{a['cardIndex']}-{a['renderIndex']}"
        assert device.capacity == {"memory": "24574Mi", "computeUnits": "38", "simdUnits": "152"}
        # The standard PCI attribute names the real PCI function: the parent's.
        assert a["resource.kubernetes.io/pciBusID"] == a["parentPciBusID"]
        by_parent[a["parentDevice"]].append(a["partitionIndex"])
    assert len(by_parent) == 8
    assert all(sorted(indexes) == list(range(8)) for indexes in by_parent.values())
    assert "gpu-0-128" in by_parent and "gpu-8-136" in by_parent


def test_modes_come_from_reported_caps():
    config = {
        "default_profile_index": 1,
        "profiles": [
            {"profile_type": "CPX", "num_partitions": 8, "profile_index": 0, "memory_caps": ["NPS1", "NPS4"]},
            {"profile_type": "SPX", "num_partitions": 1, "profile_index": 1, "memory_caps": ["NPS1"]},
            {"profile_type": "DPX", "num_partitions": 2, "profile_index": 2, "memory_caps": ["NPS1", "NPS2"]},
            {"profile_type": "N/A", "num_partitions": "N/A", "profile_index": 3, "memory_caps": ["N/A"]},
        ],
    }
    modes, default = modes_from_caps(config, ["NPS1", "NPS4"])  # NPS2 not in the memory caps
    assert [m.key for m in modes] == ["spx-nps1", "dpx-nps1", "cpx-nps1", "cpx-nps4"]
    assert default is not None and default.key == "spx-nps1"
    assert modes_from_caps(None, ["NPS1"]) == ([], None)


def _consumption_ok(inventory: Inventory, chosen: list[str]) -> bool:
    """The allocator's counter rule: the chosen devices' consumption fits every counter."""
    capacity = {(cs.name, c): Decimal(v) for cs in inventory.counter_sets for c, v in cs.counters.items()}
    used: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for name in chosen:
        for consumption in inventory.device(name).consumes_counters:
            for counter, value in consumption.counters.items():
                used[(consumption.counter_set, counter)] += Decimal(value)
    return all(used[key] <= capacity[key] for key in used)


def test_dynamic_counters_allow_one_mode_per_gpu(open_backend):
    inventory = open_backend("mi300x", "dynamic").discover()
    gpu0 = [d for d in inventory.devices if d.name == "gpu-0-128" or d.name.startswith("gpu-0-128-")]
    modes = defaultdict(list)
    for device in gpu0:
        modes[device.attributes["partitionProfile"]].append(device.name)
    assert {k: len(v) for k, v in modes.items()} == {
        "spx_nps1": 1, "dpx_nps1": 2, "qpx_nps1": 4, "qpx_nps4": 4, "cpx_nps1": 8, "cpx_nps4": 8,
    }
    # Every partition of one mode fits together ...
    for names in modes.values():
        assert _consumption_ok(inventory, names)
    # ... and no two partitions of different modes do.
    for (mode_a, names_a), (mode_b, names_b) in itertools.combinations(modes.items(), 2):
        for a, b in itertools.product(names_a, names_b):
            assert not _consumption_ok(inventory, [a, b]), (a, b)
    # Counters are per GPU, so the scheduler may pair different memory modes within one
    # XGMI hive; prepare refuses the NPS change while the hive is busy
    # (test_prepare.py::test_memory_mode_change_is_refused_while_another_gpu_of_the_hive_is_in_use).
    assert _consumption_ok(inventory, ["gpu-0-128-cpx-nps4-0", "gpu-8-136-dpx-nps1-1", "gpu-16-144"])


def test_dynamic_devices_describe_their_partition(open_backend):
    inventory = open_backend("mi300x", "dynamic").discover()
    assert len(inventory.counter_sets) == 8
    assert all(len(cs.counters) <= 32 for cs in inventory.counter_sets)
    whole = inventory.device("gpu-0-128")
    assert whole.attributes["type"] == "amdgpu" and whole.capacity["memory"] == "196592Mi"
    cpx = inventory.device("gpu-0-128-cpx-nps4-5")
    a = cpx.attributes
    assert a["type"] == "amdgpu-partition" and a["partitionIndex"] == 5 and a["parentDevice"] == "gpu-0-128"
    assert cpx.capacity == {"memory": "24574Mi", "computeUnits": "38", "simdUnits": "152"}
    assert inventory.device("gpu-0-128-dpx-nps1-1").capacity["computeUnits"] == "152"
    assert all(len(d.consumes_counters) == 1 for d in inventory.devices)
    slices = render_pool(inventory, "node-a")
    validate_slices(slices)
    counter_slices = [s for s in slices if "sharedCounters" in s["spec"]]
    device_slices = [s for s in slices if "devices" in s["spec"]]
    assert len(counter_slices) == 1 and all(len(s["spec"]["devices"]) <= 64 for s in device_slices)


def test_dynamic_on_a_gpu_without_modes_publishes_the_whole_gpu(open_backend):
    inventory = open_backend("mi210", "dynamic").discover()
    assert not inventory.counter_sets
    assert [d.attributes["type"] for d in inventory.devices] == ["amdgpu"] * 4
    assert all(not d.consumes_counters for d in inventory.devices)


def test_rocm_before_6_4_1_partitions_sharing_the_primary_minors_still_get_unique_names(open_backend):
    from dra_driver.backend.hardware_profiles import load_profile

    section = dict(load_profile("mi300x-cpx").sections["amd"])
    section["partitions_report_primary_minors"] = True  # every partition reports the primary's card/render
    old = open_backend(section=section)
    devices = old.discover().devices
    names = [d.name for d in devices]
    assert len(names) == 64 and len(set(names)) == 64
    assert sorted(d.attributes["renderIndex"] for d in devices) == list(range(128, 192))
    validate_slices(render_pool(old.discover(), "node-a"))
    # The names are the ones a fixed ROCm reports, so selectors survive the upgrade.
    assert set(names) == {d.name for d in open_backend("mi300x-cpx").discover().devices}


def test_rocm_before_6_4_1_dynamic_prepare_gets_the_partitions_own_render_node(open_backend):
    from dra_driver.backend.hardware_profiles import load_profile
    from dra_driver.backend.interface import AllocatedDevice, ClaimRef

    section = dict(load_profile("mi300x").sections["amd"])
    section["partitions_report_primary_minors"] = True
    backend = open_backend(section=section, partitioning="dynamic")
    backend.discover()
    prepared = backend.prepare(ClaimRef("default", "a", "uid-a"), [AllocatedDevice("gpu", "node-a", "gpu-8-136-cpx-nps4-3")])
    assert [n.path for n in prepared.devices[0].edits.device_nodes][1:] == ["/dev/dri/renderD139", "/dev/dri/card11"]


def test_looking_up_one_gpu_reads_only_its_partitions(open_backend, monkeypatch):
    """Prepare looks a GPU up several times per claim; reading every partition of the node each time
    made a dynamic 8-device claim cost ~14 ms of CPU (docs/performance.md)."""
    from dra_driver_amd import discovery

    backend = open_backend("mi300x-cpx", partitioning="dynamic")
    everything = discovery.read_partitions(backend.smi)
    gpu = sorted(everything)[3]
    assert discovery.read_partitions(backend.smi, only=gpu) == {gpu: everything[gpu]}
    reads: list[str] = []
    real = discovery.read_partition

    def counting(smi, handle):
        partition = real(smi, handle)
        reads.append(discovery.parent_bdf(partition.bdf))
        return partition

    monkeypatch.setattr(discovery, "read_partition", counting)
    assert backend._partitioner.current(gpu) == (
        backend.smi.compute_partition(everything[gpu][0].handle),
        backend.smi.memory_partition(everything[gpu][0].handle),
    )
    assert set(reads) == {gpu} and len(reads) == len(everything[gpu])
