"""Static and dynamic MIG discovery."""

from __future__ import annotations


from decimal import Decimal
import json
from pathlib import Path

import pytest

from dra_driver.model import render_pool, validate_slices
from dra_driver.model import quantity
from dra_driver.backend.vocabulary import INTERCONNECT, PARTITION

from .conftest import OpenBackend, profile_section

MIG_PROFILE_NAMES = {19: "1g.5gb", 9: "3g.20gb", 14: "2g.10gb"}


def test_static_mig_devices_of_dgx_a100(open_backend: OpenBackend) -> None:
    section = profile_section("dgx-a100-mig")
    inventory = open_backend(section).discover()
    names = [d.name for d in inventory.devices]
    # MIG-enabled GPUs publish their MIG devices only, never the parent as a whole.
    assert not {"gpu-0", "gpu-1", "gpu-2", "gpu-3"} & set(names)
    assert {"gpu-4", "gpu-5", "gpu-6", "gpu-7"} <= set(names)
    expected = {
        f"gpu-{gpu['minor']}-mig-{MIG_PROFILE_NAMES[m['profileId']].replace('.', '')}-{m['profileId']}-{m['start']}": (gpu, m)
        for gpu in section["gpus"]
        for m in gpu.get("migDevices", [])
    }
    migs = {d.name: d for d in inventory.devices if d.attributes["type"] == "mig"}
    assert set(migs) == set(expected)
    for name, device in migs.items():
        gpu, spec = expected[name]
        assert device.attributes["uuid"] == spec["uuid"]
        assert device.attributes["parentUUID"] == gpu["uuid"]
        assert device.attributes["profile"] == MIG_PROFILE_NAMES[spec["profileId"]]
        assert device.attributes["productName"] == "NVIDIA A100-SXM4-40GB"
        assert device.attributes[PARTITION] is True
        assert device.attributes[INTERCONNECT] == "none"
        assert not device.consumes_counters


def test_static_mig_capacities_match_the_profile(open_backend: OpenBackend) -> None:
    devices = {d.name: d for d in open_backend("dgx-a100-mig").discover().devices}
    small, large = devices["gpu-0-mig-1g5gb-19-0"], devices["gpu-1-mig-3g20gb-9-4"]
    assert small.capacity == {
        "memory": "4864Mi",
        "multiprocessors": "14",
        "copyEngines": "1",
        "decoders": "0",
        "encoders": "0",
        "jpegEngines": "0",
        "ofaEngines": "0",
    }
    assert large.capacity["memory"] == "19968Mi"
    assert large.capacity["multiprocessors"] == "42"
    assert large.capacity["decoders"] == "2"


def test_static_mode_leaves_mig_disabled_gpus_whole(open_backend: OpenBackend) -> None:
    inventory = open_backend("dgx-h100").discover()
    assert not inventory.counter_sets
    assert all(d.attributes["type"] == "gpu" for d in inventory.devices)


def _placements(section: dict, gpu_position: int = 0) -> dict[int, tuple[dict, list[int]]]:
    model = section["models"][section["gpus"][gpu_position]["model"]]
    return {p["id"]: (p, p["placements"]["starts"]) for p in model["mig"]["gpuInstanceProfiles"]}


@pytest.mark.parametrize("profile", ["dgx-h100", "h200"])  # dgx-a100-mig: see test_dynamic_a100.py
def test_dynamic_publishes_every_placement_nvml_reports(open_backend: OpenBackend, profile: str) -> None:
    section = profile_section(profile)
    inventory = open_backend(section, partitioning="dynamic").discover()
    for gpu in section["gpus"]:
        minor = gpu["minor"]
        published = {d.name for d in inventory.devices if d.attributes.get("parentUUID") == gpu["uuid"]}
        expected = {
            f"gpu-{minor}-mig-{row['name'].removeprefix('MIG ').replace('.', '').replace('+', '-')}-{pid}-{start}"
            for pid, (row, starts) in _placements(section).items()
            for start in starts
        }
        assert published == expected
        assert f"gpu-{minor}" in {d.name for d in inventory.devices}
    assert len(inventory.counter_sets) == len(section["gpus"])
    slices = render_pool(inventory, node_name="node-a")
    validate_slices(slices)
    for obj in slices:
        spec = obj["spec"]
        assert not (spec.get("devices") and spec.get("sharedCounters"))
        assert len(spec.get("devices") or []) <= 64


def test_dynamic_counter_set_and_consumption(open_backend: OpenBackend) -> None:
    inventory = open_backend("dgx-h100", partitioning="dynamic").discover()
    counters = {cs.name: cs for cs in inventory.counter_sets}["gpu-0-counter-set"]
    assert counters.counters["memory"] == "81559Mi"
    assert counters.counters["multiprocessors"] == "132"
    assert counters.counters["copy-engines"] == "8"
    assert {f"memory-slice-{i}" for i in range(8)} <= set(counters.counters)
    devices = {d.name: d for d in inventory.devices}
    full = devices["gpu-0"]
    assert full.consumes_counters[0].counter_set == "gpu-0-counter-set"
    assert dict(full.consumes_counters[0].counters) == dict(counters.counters)
    three_g = devices["gpu-0-mig-3g40gb-9-4"].consumes_counters[0]
    assert three_g.counter_set == "gpu-0-counter-set"
    assert {k for k in three_g.counters if k.startswith("memory-slice-")} == {f"memory-slice-{i}" for i in range(4, 8)}
    assert three_g.counters["memory"] == "40448Mi"
    assert three_g.counters["multiprocessors"] == "60"
    assert devices["gpu-0-mig-3g40gb-9-4"].attributes["profile"] == "3g.40gb"
    assert "uuid" not in devices["gpu-0-mig-3g40gb-9-4"].attributes  # not created yet


def _packings(placements: list[tuple[str, dict]]) -> list[list[tuple[str, dict]]]:
    """Every set of placements whose memory slices do not overlap."""
    result: list[list[tuple[str, dict]]] = [[]]

    def extend(start: int, used: set[str], chosen: list[tuple[str, dict]]) -> None:
        for position in range(start, len(placements)):
            name, counters = placements[position]
            slices = {k for k in counters if k.startswith("memory-slice-")}
            if slices & used:
                continue
            result.append([*chosen, placements[position]])
            extend(position + 1, used | slices, [*chosen, placements[position]])

    extend(0, set(), [])
    return result


@pytest.mark.parametrize(("profile", "minor"), [("dgx-h100", 0), ("h200", 0), ("dgx-a100-mig", 3)])  # A100 gpu-3: MIG on, empty
def test_every_valid_mig_layout_fits_the_counters(open_backend: OpenBackend, profile: str, minor: int) -> None:
    """Any non-overlapping mix NVML allows (at most one +me instance) must be allocatable."""
    inventory = open_backend(profile, partitioning="dynamic").discover()
    total = {k: quantity.parse(v) for k, v in {cs.name: cs for cs in inventory.counter_sets}[f"gpu-{minor}-counter-set"].counters.items()}
    placements = [
        (d.name, dict(d.consumes_counters[0].counters))
        for d in inventory.devices
        if d.attributes.get("minor") == minor and d.attributes["type"] == "mig"
    ]
    checked = 0
    for packing in _packings(placements):
        if sum(1 for name, _ in packing if "-me-" in name) > 1:
            continue
        used: dict[str, Decimal] = {}
        for _, counters in packing:
            for key, value in counters.items():
                used[key] = used.get(key, Decimal(0)) + quantity.parse(value)
        over = {k: v for k, v in used.items() if v > total[k]}
        assert not over, (packing, over)
        checked += 1
    assert checked > 100


def test_dynamic_attributes_stay_within_the_limit(open_backend: OpenBackend) -> None:
    for device in open_backend("dgx-h100", partitioning="dynamic").discover().devices:
        assert len(device.attributes) + len(device.capacity) <= 32


def test_mig_profile_not_supported_is_skipped(open_backend: OpenBackend) -> None:
    section = profile_section("dgx-h100")
    rows = section["models"]["h100-sxm5-80gb"]["mig"]["gpuInstanceProfiles"]
    section["models"]["h100-sxm5-80gb"]["mig"]["gpuInstanceProfiles"] = [r for r in rows if r["id"] != 20]
    names = [d.name for d in open_backend(section, partitioning="dynamic").discover().devices]
    assert not any("-me-" in n for n in names)
    assert len([n for n in names if n.startswith("gpu-0-")]) == 25 - 7



@pytest.mark.parametrize("partitioning", ["static", "dynamic"])
def test_failing_profile_query_keeps_a_mig_disabled_gpu(open_backend: OpenBackend, partitioning: str) -> None:
    section = profile_section("dgx-h100")
    section["gpus"][2]["failures"] = {"nvmlDeviceGetGpuInstanceProfileInfoV": "UNKNOWN"}
    devices = open_backend(section, partitioning=partitioning).discover().devices
    gpu2 = [d for d in devices if d.name.startswith("gpu-2")]
    assert [d.name for d in gpu2] == ["gpu-2"]  # whole, no placements
    assert set(gpu2[0].capacity) == {"memory"}  # profile-derived counts omitted
    assert gpu2[0].consumes_counters == []
    assert len([d for d in devices if "-mig-" not in d.name]) == 8


def test_failing_profile_query_skips_a_gpu_in_mig_mode(open_backend: OpenBackend) -> None:
    section = profile_section("dgx-a100-mig")
    section["gpus"][0]["failures"] = {"nvmlDeviceGetGpuInstanceProfileInfoV": "UNKNOWN"}
    names = [d.name for d in open_backend(section).discover().devices]
    assert not any(name.startswith("gpu-0") for name in names)
    assert any(name.startswith("gpu-1-mig-") for name in names)


@pytest.mark.parametrize(("profile", "recording_name"), [("h200", "h200-nvml-probe.json"), ("dgx-h100", "h100-nvml-probe.json")])
def test_profile_mig_table_matches_the_real_gpu(profile: str, recording_name: str) -> None:
    """A shipped profile's GPU-instance rows equal what NVML reported on the real GPU (field and placement)."""
    recording = json.loads((Path(__file__).parent / "recordings" / recording_name).read_text())
    section = profile_section(profile)
    assert section["models"][section["gpus"][0]["model"]]["name"] == recording["device"]["name"]
    assert section["driverVersion"] == recording["driverVersion"]
    rows = {row["profile"]: row for row in section["models"][section["gpus"][0]["model"]]["mig"]["gpuInstanceProfiles"]}
    fields = {
        "id": "id",
        "name": "name",
        "sliceCount": "sliceCount",
        "instanceCount": "instanceCount",
        "memorySizeMB": "memoryMB",
        "multiprocessorCount": "multiprocessors",
        "copyEngineCount": "copyEngines",
        "decoderCount": "decoders",
        "encoderCount": "encoders",
        "jpegCount": "jpegEngines",
        "ofaCount": "ofaEngines",
    }
    real = [entry for entry in recording["device"]["giProfiles"] if isinstance(entry.get("info"), dict)]
    assert {entry["profile"] for entry in real} == set(rows)
    for entry in real:
        row = rows[entry["profile"]]
        assert {ours: row[ours] for theirs, ours in fields.items()} == {ours: entry["info"][theirs] for theirs, ours in fields.items()}
        assert [{"start": s, "size": row["placements"]["size"]} for s in row["placements"]["starts"]] == entry["placements"]
