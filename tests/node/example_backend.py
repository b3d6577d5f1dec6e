"""A minimal VendorBackend for plugin-logic tests (no hardware library to fake below it).

It keeps a journal of prepare/unprepare/reconcile calls in its state_dir so a
test can check what a daemon subprocess did, and it can be told to fail via
its opaque config (`fail: true`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from dra_driver.common.errors import ConfigError, DeviceError
from dra_driver.model.device import Device, Inventory
from dra_driver.backend.interface import (
    AllocatedDevice,
    BackendSettings,
    ClaimRef,
    ContainerEdits,
    DeviceNode,
    PreparedClaim,
    PreparedDevice,
    VendorBackend,
)

DRIVER = "gpu.example.com"


class ExampleConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    mode: Literal["exclusive", "shared"] = "exclusive"
    fail: bool = False


class ExampleBackend(VendorBackend):
    vendor = "example"
    driver_name = DRIVER

    def __init__(self, settings: BackendSettings, devices: int = 8) -> None:
        self.settings = settings
        self.names = [f"gpu-{i}" for i in range(devices)]
        self.journal_path = Path(settings.state_dir) / "journal.jsonl" if settings.state_dir else None
        self.calls: list[tuple[str, Any]] = []

    @classmethod
    def from_host(cls, settings: BackendSettings) -> VendorBackend:
        return cls(settings)

    @classmethod
    def from_profile(cls, section: Mapping[str, Any], settings: BackendSettings) -> VendorBackend:
        return cls(settings, int(section.get("devices", 8)))

    def discover(self) -> Inventory:
        return Inventory(driver=DRIVER, devices=[Device(name=n) for n in self.names])

    def validate_config(self, parameters: Mapping[str, Any]) -> BaseModel:
        try:
            return ExampleConfig.model_validate(dict(parameters))
        except PydanticValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise ConfigError(f"field {field!r}: {first['msg']}") from exc

    def _record(self, op: str, data: Any) -> None:
        self.calls.append((op, data))
        if self.journal_path is not None:
            with self.journal_path.open("a") as handle:
                handle.write(json.dumps({"op": op, "data": data}) + "\n")

    def prepare(self, claim: ClaimRef, devices: Sequence[AllocatedDevice]) -> PreparedClaim:
        for dev in devices:
            if isinstance(dev.config, ExampleConfig) and dev.config.fail:
                raise DeviceError(dev.device, "asked to fail by its config")
        self._record(
            "prepare", {"uid": claim.uid, "devices": [d.device for d in devices], "modes": [getattr(d.config, "mode", None) for d in devices]}
        )
        prepared = [
            PreparedDevice(
                device=d.device,
                edits=ContainerEdits(
                    device_nodes=[DeviceNode(path=f"/dev/example{d.device.split('-')[-1]}", type="c", major=195, minor=int(d.device.split("-")[-1]))]
                ),
            )
            for d in devices
        ]
        visible = ",".join(d.device for d in devices)
        by_request: dict[str, list[str]] = {}
        for d in devices:
            by_request.setdefault(d.request, []).append(d.device)
        return PreparedClaim(
            devices=prepared,
            claim_edits=ContainerEdits(env=[f"EXAMPLE_VISIBLE_DEVICES={visible}"]),
            request_edits={request: ContainerEdits(env=[f"EXAMPLE_REQUEST_DEVICES={','.join(names)}"]) for request, names in by_request.items()},
            state={"uid": claim.uid, "devices": [d.device for d in devices]},
        )

    def unprepare(self, claim: ClaimRef, state: Mapping[str, Any]) -> None:
        self._record("unprepare", {"uid": claim.uid, "state": dict(state)})

    def reconcile(self, live_states: Sequence[Mapping[str, Any]]) -> None:
        self._record("reconcile", [dict(s) for s in live_states])


def journal(state_dir: Path) -> list[dict[str, Any]]:
    path = state_dir / "journal.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]
