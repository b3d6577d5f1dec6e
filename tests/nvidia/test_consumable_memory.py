"""Fractional GPUs (--consumable-gpu-memory): whole GPUs published for several claims with a `memory` request policy,
accepted by the 1.35 schema and by the API rules, allocated several claims to one GPU by explain, each claim's share
enforced through an MPS control daemon of its own, and published plainly when the API server drops the fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dra_driver.cli.main import main
from dra_driver.kube.client import make_json_api
from dra_driver.simulation.api_server import ServerOptions, SimApiServer
from dra_driver.model.render import render_pool
from dra_driver.model.validation import slice_errors
from dra_driver.node.publisher import SlicePublisher
from dra_driver.node.publisher.publisher import PublisherOptions
from dra_driver.backend.interface import AllocatedDevice, ClaimRef
from dra_driver_nvidia.backend import NvidiaBackend

from .conftest import OpenBackend
from .sharing_helpers import ask, daemons_under

K8S_VERSION = "1.35.0"
GATE = ("--feature-gates", "DRAConsumableCapacity=true")


@pytest.fixture
def shared(open_backend: OpenBackend, tmp_path: Path) -> NvidiaBackend:
    return open_backend("dgx-h100", state_dir=tmp_path / "state", consumable_gpu_memory=True)


def test_whole_gpus_are_published_for_several_claims_with_a_memory_policy(shared: NvidiaBackend) -> None:
    slices = render_pool(shared.discover(), "node-a")
    gpu = next(d for s in slices for d in s["spec"]["devices"] if d["name"] == "gpu-0")
    assert gpu["allowMultipleAllocations"] is True
    memory = gpu["capacity"]["memory"]
    assert memory["requestPolicy"] == {"default": memory["value"], "validRange": {"min": "1Gi", "step": "1Mi"}}
    assert list(gpu["capacity"]) == ["memory"]  # a capacity without a policy would be charged whole to every claim
    assert [e for obj in slices for e in slice_errors(obj)] == []


def test_the_slices_pass_the_1_35_schema(shared: NvidiaBackend) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed (test extra)")
    for obj in render_pool(shared.discover(), "node-a"):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_api_rules_refuse_a_policy_without_multiple_allocations_or_off_step(shared: NvidiaBackend) -> None:
    slices = render_pool(shared.discover(), "node-a")
    devices = slices[0]["spec"]["devices"]
    del devices[0]["allowMultipleAllocations"]
    devices[1]["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] = "1Gi"  # 81559Mi is not 1Gi + whole GiB
    problems = [str(e) for e in slice_errors(slices[0])]
    assert any("allowMultipleAllocations: true" in p for p in problems)
    assert any("whole steps" in p for p in problems)


def _claim(name: str, amount: str) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": amount}}}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"devices": {"requests": [request]}}}  # fmt: skip


def _pod(claims: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": [{"name": "c", "image": "x"}], "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims]},
    }


def test_explain_puts_several_claims_on_one_gpu(shared: NvidiaBackend, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one_gpu = [s for s in render_pool(shared.discover(), "node-a")]
    for obj in one_gpu:  # a node with gpu-0 only, so every claim must land on it
        obj["spec"]["devices"] = [d for d in obj["spec"]["devices"] if d["name"] == "gpu-0"]
    fleet = tmp_path / "fleet.json"
    fleet.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": [s for s in one_gpu if s["spec"]["devices"]]}))
    claims = tmp_path / "claims.yaml"
    claims.write_text("\n---\n".join(json.dumps(d) for d in [_claim("a", "20Gi"), _claim("b", "30Gi"), _claim("c", "25Gi"), _pod(["a", "b", "c"])]))
    code = main(["explain", str(claims), "--fleet", str(fleet), *GATE, "-o", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    results = [report["allocations"][f"ml/{name}"]["devices"]["results"][0] for name in "abc"]
    assert [(r["device"], r["consumedCapacity"]["memory"]) for r in results] == [("gpu-0", "20Gi"), ("gpu-0", "30Gi"), ("gpu-0", "25Gi")]
    assert len({r["shareID"] for r in results}) == 3
    claims.write_text("\n---\n".join(json.dumps(d) for d in [_claim("a", "40Gi"), _claim("b", "41Gi"), _pod(["a", "b"])]))
    assert main(["explain", str(claims), "--fleet", str(fleet), *GATE]) == 1  # 81Gi > 81559Mi: not both
    capsys.readouterr()


def _share(device: str, share_id: str, amount: str) -> list[AllocatedDevice]:
    return [AllocatedDevice(request="gpu", pool="node-a", device=device, share_id=share_id, consumed_capacity=(("memory", amount),))]


def test_each_claims_share_is_enforced_by_its_own_daemon(shared: NvidiaBackend) -> None:
    fake = shared.simulator
    assert fake is not None and shared.settings.state_dir is not None
    uuid = fake.gpus[0].spec.uuid
    first = shared.prepare(ClaimRef("ml", "a", "uid-a"), _share("gpu-0", "a1b2c3d4", "20Gi"))
    second = shared.prepare(ClaimRef("ml", "b", "uid-b"), _share("gpu-0", "e5f6a7b8", "40Gi"))
    pipes = {pid: pipe for pid, pipe in daemons_under(shared.settings.state_dir).items()}
    assert len(pipes) == 2
    answers = sorted(ask(shared, pipe, f"get_default_device_pinned_mem_limit {uuid}").stdout.strip() for pipe in pipes.values())
    assert answers == ["20G", "40G"]
    threads = sorted(ask(shared, pipe, "get_default_active_thread_percentage").stdout.strip() for pipe in pipes.values())
    assert threads == ["26.0", "51.0"]  # the share of 81559Mi, rounded up
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M" in first.claim_edits.env
    assert fake.gpus[0].compute_mode == 0  # a shared GPU keeps the default mode: each claim's server opens it
    shared.unprepare(ClaimRef("ml", "a", "uid-a"), first.state)
    shared.unprepare(ClaimRef("ml", "b", "uid-b"), second.state)
    assert daemons_under(shared.settings.state_dir) == {}


def test_a_share_with_an_explicit_lower_mps_limit_keeps_the_lower_one(shared: NvidiaBackend) -> None:
    from .sharing_helpers import mps

    device = AllocatedDevice(request="gpu", pool="node-a", device="gpu-1", share_id="a1b2c3d4", consumed_capacity=(("memory", "40Gi"),),
                             config=mps(defaultPinnedDeviceMemoryLimit="10Gi", defaultActiveThreadPercentage=20))  # fmt: skip
    prepared = shared.prepare(ClaimRef("ml", "a", "uid-a"), [device])
    assert (
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M" in prepared.claim_edits.env and "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=20" in prepared.claim_edits.env
    )
    shared.unprepare(ClaimRef("ml", "a", "uid-a"), prepared.state)


def test_a_bad_consumed_amount_fails_the_claim_alone(shared: NvidiaBackend) -> None:
    from dra_driver.common.errors import DraError

    with pytest.raises(DraError, match="consumedCapacity memory 'lots' is not a quantity"):
        shared.prepare(ClaimRef("ml", "a", "uid-a"), _share("gpu-0", "a1b2c3d4", "lots"))
    assert shared.recorded_claims() == []


def test_publisher_falls_back_to_one_claim_per_gpu_when_the_server_drops_the_fields(shared: NvidiaBackend, caplog: pytest.LogCaptureFixture) -> None:
    inventory = shared.discover()
    with SimApiServer(ServerOptions(consumable_capacity=False)) as server:
        server.add_node("node-a")
        publisher = SlicePublisher(make_json_api(server.url), "node-a", shared.driver_name, lambda _partitioning: inventory,
                                   PublisherOptions())  # fmt: skip
        try:
            publisher.sync_once()
            stored = [d for o in server.objects("ResourceSlice") for d in o["spec"]["devices"]]
            assert stored and not any(d.get("allowMultipleAllocations") for d in stored)
            assert not any("requestPolicy" in c for d in stored for c in (d.get("capacity") or {}).values())
            assert any("DRAConsumableCapacity" in r.getMessage() for r in caplog.records)
            writes = server.writes()
            publisher.sync_once()
            assert server.writes() == writes  # settled: the plain slices are not rewritten
        finally:
            publisher.stop()


def test_fleet_shows_shared_gpus_with_what_is_left(shared: NvidiaBackend, capsys: pytest.CaptureFixture[str]) -> None:
    from dra_driver.sources.fleet import Fleet
    from dra_driver.fleet import Filters, build_view
    from dra_driver.fleet.render import to_data, to_table

    def held(name: str, device: str, amount: str) -> dict[str, Any]:
        result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-a", "device": device, "shareID": f"{name}0000000",
                  "consumedCapacity": {"memory": amount}}  # fmt: skip
        return {**_claim(name, amount), "status": {"allocation": {"devices": {"results": [result]}}}}

    fleet = Fleet(sources=["test"], slices=render_pool(shared.discover(), "node-a"))
    fleet.claims = [held("a", "gpu-0", "20Gi"), held("b", "gpu-0", "30Gi"), held("c", "gpu-1", "81559Mi")]
    view = build_view(fleet, Filters())
    rows = {d.device: d for d in view.devices}
    assert rows["gpu-0"].state == "free" and [(s.used, s.left) for s in rows["gpu-0"].shared] == [("50Gi", "30359Mi")]
    assert rows["gpu-1"].state == "allocated"  # nothing left for another claim
    assert rows["gpu-2"].state == "free" and rows["gpu-2"].shared[0].used == "0"
    table = to_table(view)
    assert "Shared devices in use" in table
    assert any(
        line.split() == ["node-a", "gpu.nvidia.com", "gpu-0", "gpu.nvidia.com/memory", "81559Mi", "50Gi", "30359Mi", "2"]
        for line in table.splitlines()
    )
    device = next(d for d in to_data(view)["devices"] if d["device"] == "gpu-0")
    assert device["shared"] == [{"capacity": "gpu.nvidia.com/memory", "total": "81559Mi", "used": "50Gi", "left": "30359Mi"}]
