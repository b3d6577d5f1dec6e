"""Which checkpoint lines a prepare writes: the backend-state line only when there is state to record and the
backend cannot undo the claim from its own records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.node.example_backend import DRIVER, ExampleBackend

from dra_driver.node.checkpoint import Checkpoint
from dra_driver.model.resource_v1 import ResourceClaim
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.prepare import PrepareService
from dra_driver.backend.interface import AllocatedDevice, BackendSettings, ClaimRef, PreparedClaim


class Claims:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], ResourceClaim] = {}

    def add(self, name: str, devices: list[str]) -> ClaimRef:
        body = allocated_claim_object(name, "default", DRIVER, "node-a", {"gpu": devices})
        body["metadata"]["uid"] = f"uid-{name}"
        self.objects[("default", name)] = ResourceClaim.model_validate(body)
        return ClaimRef("default", name, f"uid-{name}")

    def get(self, namespace: str, name: str, uid: str = "", deadline: float | None = None) -> ResourceClaim:
        return self.objects[(namespace, name)]


class StatelessBackend(ExampleBackend):
    """Prepares whole devices and creates nothing: its state has only empty values."""

    def prepare(self, claim: ClaimRef, devices: list[AllocatedDevice]) -> PreparedClaim:  # type: ignore[override]
        prepared = super().prepare(claim, devices)
        return PreparedClaim(devices=prepared.devices, state={"created": []})


def phases_written(checkpoint_dir: Path, uid: str) -> list[tuple[str, Any]]:
    lines = [json.loads(line) for line in (checkpoint_dir / f"{uid}.json").read_bytes().split(b"\n") if line]
    return [(line["body"]["record"]["phase"], line["body"]["record"]["backend_state"]) for line in lines]


class SelfRecordingBackend(ExampleBackend):
    """Undoes a claim from its own records (as NVIDIA with a state dir): its state need not be recorded before the spec."""

    @property
    def undoes_from_own_records(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("backend_class", "expected"),
    [
        (ExampleBackend, ["PrepareStarted", "PrepareStarted", "PrepareCompleted"]),  # state recorded before the CDI write
        (StatelessBackend, ["PrepareStarted", "PrepareCompleted"]),  # nothing to record: one write fewer
        (SelfRecordingBackend, ["PrepareStarted", "PrepareCompleted"]),  # its own records undo it: one write fewer
    ],
)
def test_backend_state_line_is_written_only_when_there_is_state(tmp_path: Path, backend_class: type[ExampleBackend], expected: list[str]) -> None:
    boot = tmp_path / "boot_id"
    boot.write_text("b1\n")
    claims = Claims()
    service = PrepareService(backend_class(BackendSettings(node_name="node-a")), claims, Checkpoint(tmp_path / "ckpt", boot), tmp_path / "cdi")
    service.recover()
    ref = claims.add("train", ["gpu-1"])
    assert service.prepare([ref])[ref.uid].error == ""
    written = phases_written(tmp_path / "ckpt", ref.uid)
    assert [phase for phase, _ in written] == expected
    assert written[-1][1] == service.checkpoint_record(ref.uid).backend_state  # the completed line has the real state
    service.close()
