"""`dra-driver fleet --kubeconfig` against the in-process API server, with claims the allocator placed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.sources import fleet as fleets
from dra_driver.cli.main import main
from dra_driver.explain import ExplainRequest, explain
from dra_driver.kube.api_source import api_source
from dra_driver.sources.fleet_source import FleetSource
from dra_driver.sources.classes import shipped_class_documents
from dra_driver.simulation.api_server import SimApiServer

GOLDEN = Path(__file__).parent / "golden" / "fleet_mixed.txt"


def claim(name: str, namespace: str, device_class: str, count: int, same: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"requests": [{"name": "accel", "exactly": {"deviceClassName": device_class, "count": count}}]}
    if same:
        spec["constraints"] = [{"matchAttribute": same}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": spec},
    }


def schedule(server: SimApiServer, kubeconfig: Path, tmp: Path, doc: dict[str, Any], pods: list[str]) -> dict[str, Any]:
    """Allocate `doc` with explain's allocator against what the cluster holds now, store it reserved for `pods`."""
    path = tmp / f"{doc['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = explain(ExplainRequest(str(path), FleetSource(kubeconfig=str(kubeconfig))))
    assert result.explanation.chosen is not None, result.explanation.error
    allocation = result.explanation.chosen.allocations[f"{doc['metadata']['namespace']}/{doc['metadata']['name']}"]
    reserved = [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"} for pod in pods]
    return server.store.put({**doc, "status": {"allocation": allocation, "reservedFor": reserved}})


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[SimApiServer, Path]]:
    """Two mixed nodes (2x H100 + 2x MI300X each); team-a trains on two H100s, team-b infers on one MI300X."""
    with SimApiServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        for doc in fleets.simulated("mixed-node", 2).slices:
            server.store.put({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", **doc})
        for device_class in shipped_class_documents():  # installed as deploy/ does: explain uses the cluster's classes
            server.store.put(device_class)
        schedule(server, kubeconfig, tmp_path, claim("train", "team-a", "gpu.nvidia.com", 2, "dra-driver.io/interconnectDomain"), ["trainer-0"])
        schedule(server, kubeconfig, tmp_path, claim("infer", "team-b", "gpu.amd.com", 1), ["infer-7", "infer-8"])
        server.store.put(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer-0", "namespace": "team-a"}, "status": {"phase": "Running"}}
        )
        server.store.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "infer-7", "namespace": "team-b"}, "status": {"phase": "Pending"}})
        yield server, kubeconfig


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["fleet", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_table_matches_the_golden_output(cluster: tuple[SimApiServer, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--kubeconfig", str(cluster[1]))
    assert code == 0
    assert out == GOLDEN.read_text().replace("SOURCE", f"cluster {cluster[0].url} (kubeconfig {cluster[1]})")


def test_every_resource_is_listed_once_per_page_read_only(
    cluster: tuple[SimApiServer, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, kubeconfig = cluster
    monkeypatch.setattr(fleets, "LIST_PAGE", 3)  # 4 slices, 2 claims, the shipped classes: slices come in two pages
    server.requests.clear()
    code, out, _ = run(capsys, "--kubeconfig", str(kubeconfig), "-o", "json")
    view = json.loads(out)
    assert code == 0 and len(view["devices"]) == 8
    assert {verb for verb, _ in server.requests} == {"list"}
    assert server.requests[("list", "resourceslices")] == 2 and server.requests[("list", "resourceclaims")] == 1
    assert server.requests[("list", "pods")] == 1 and server.requests[("list", "deviceclasses")] == -(-len(shipped_class_documents()) // 3)


def test_json_names_claim_pods_and_their_phases(cluster: tuple[SimApiServer, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--kubeconfig", str(cluster[1]), "-o", "json", "--namespace", "team-b")
    view = json.loads(out)
    assert code == 0
    (held,) = view["devices"]
    assert held["state"] == "allocated" and held["node"] == "node-0" and held["vendor"] == "amd"
    assert held["holders"] == [
        {
            "namespace": "team-b",
            "claim": "infer",
            "request": "accel",
            "pods": [{"name": "infer-7", "phase": "Pending"}, {"name": "infer-8", "phase": "Missing"}],
        }
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--vendor", "nvidia"], {("node-0", "allocated"): 2, ("node-1", "free"): 2}),
        (["--vendor", "AMD", "--node", "node-1"], {("node-1", "free"): 2}),
        (["--node", "node-0", "--namespace", "team-a"], {("node-0", "allocated"): 2}),
        (["hopper-or-cdna3.dra-driver.io", "--node", "node-1"], {("node-1", "free"): 4}),
    ],
)
def test_filters(
    cluster: tuple[SimApiServer, Path], capsys: pytest.CaptureFixture[str], args: list[str], expected: dict[tuple[str, str], int]
) -> None:
    code, out, _ = run(capsys, "--kubeconfig", str(cluster[1]), "-o", "yaml", *args)
    counts: dict[tuple[str, str], int] = {}
    for device in yaml.safe_load(out)["devices"]:
        counts[(device["node"], device["state"])] = counts.get((device["node"], device["state"]), 0) + 1
    assert code == 0 and counts == expected


def test_class_argument_lists_the_free_devices_it_selects(cluster: tuple[SimApiServer, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--kubeconfig", str(cluster[1]), "gpu.amd.com")
    assert code == 0
    section = out.split("Free devices matching class gpu.amd.com:\n", 1)[1].splitlines()
    assert [line.split()[:2] for line in section[1:3]] == [["node-0", "gpu.amd.com"], ["node-1", "gpu.amd.com"]]
    assert [line.split()[3] for line in section[1:3]] == ["1", "2"]  # FREE column: one of node-0's MI300X is held


def test_unknown_class_and_vendor_are_clear_errors(cluster: tuple[SimApiServer, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--kubeconfig", str(cluster[1]), "no-such.class")
    assert code == 2 and "'no-such.class'" in err and "gpu.nvidia.com" not in err  # not a list of all 32 classes
    code, _, err = run(capsys, "--kubeconfig", str(cluster[1]), "gpu.nvidia.cmo")
    assert code == 2 and "did you mean 'gpu.nvidia.com'?" in err
    code, _, err = run(capsys, "--kubeconfig", str(cluster[1]), "--vendor", "acme")
    assert code == 2 and "--vendor" in err and "gaudi" in err


def test_a_slow_read_says_on_stderr_how_far_it_got(
    cluster: tuple[SimApiServer, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fleets, "LIST_PAGE", 3)  # 4 slices: two pages, the first one "so far"
    monkeypatch.setattr(fleets, "PROGRESS_AFTER_S", 0.0)  # every read counts as slow
    monkeypatch.setattr(fleets, "_clock", iter(range(0, 1000, 2)).__next__)  # 2 s between looks: every page is reported
    code, out, err = run(capsys, "--kubeconfig", str(cluster[1]), "-o", "json")
    assert code == 0 and len(json.loads(out)["devices"]) == 8  # stdout stays the data alone
    lines = err.splitlines()
    assert any("3 ResourceSlices so far" in line for line in lines)
    assert any(line.endswith("4 ResourceSlices (4.0 s)") for line in lines)  # the second page: the third look
    assert lines[-1].startswith(f"read {cluster[0].url}") and "4 ResourceSlices, " in lines[-1] and "2 ResourceClaims" in lines[-1]


def test_a_quick_read_prints_no_progress(
    cluster: tuple[SimApiServer, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fleets, "_clock", lambda: 100.0)  # no time passes
    code, _, err = run(capsys, "--kubeconfig", str(cluster[1]), "-o", "json")
    assert code == 0 and err == ""


def test_repeated_device_values_are_one_object_per_page_read(cluster: tuple[SimApiServer, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Read from the cluster, every device's equal attribute and capacity values are one dict, across pages (memory at 5,000 nodes)."""
    monkeypatch.setattr(fleets, "LIST_PAGE", 3)  # 4 slices: two pages share one table
    fleet = fleets.from_cluster(api_source(kubeconfig=str(cluster[1])))
    devices = [device for obj in fleet.slices for device in obj["spec"]["devices"]]
    models = {id(device["attributes"]["productName"]) for device in devices if "productName" in device["attributes"]}
    memory = {id(device["capacity"]["memory"]) for device in devices if "memory" in (device.get("capacity") or {})}
    assert len(devices) == 8 and len(models) == 2 and len(memory) == 2  # H100 and MI300X: one object each
