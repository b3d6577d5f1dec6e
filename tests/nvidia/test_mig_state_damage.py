"""Dynamic MIG: a claim whose checkpoint record is damaged or lost keeps its instance and its placement.

The restart is modelled as in test_owned_instances.py: a fresh NvidiaBackend over the same simulated
library (the GPU keeps its instances across a daemon restart) and the same state dir, and a fresh
PrepareService over the same checkpoint and CDI dirs. The claim's evidence is its CDI spec, or with the
spec gone too, only the MIG ownership journal.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from dra_driver.node import cdi
from dra_driver.node.checkpoint import Checkpoint
from dra_driver.simulation import api_server as sim_apiserver
from dra_driver.kube.claims import ClaimReader
from dra_driver.simulation.claims import allocated_claim_object
from dra_driver.node.plugin.prepare import PrepareService
from dra_driver.backend.interface import ClaimRef
from dra_driver_nvidia.backend import NvidiaBackend
from dra_driver_nvidia.ownership import SUBDIR

from .conftest import OpenBackend
from .test_owned_instances import instances, restarted

DRIVER = "gpu.nvidia.com"
DEVICE = "gpu-0-mig-1g10gb-19-0"


def claim(server: sim_apiserver.SimApiServer, name: str) -> ClaimRef:
    stored = server.store.put(allocated_claim_object(name, "default", DRIVER, "node-a", {"gpu": [DEVICE]}, device_class=DRIVER))
    return ClaimRef("default", name, stored["metadata"]["uid"])


def service(backend: NvidiaBackend, server: sim_apiserver.SimApiServer, root: Path) -> PrepareService:
    (root / "boot_id").write_text("boot-1\n")
    return PrepareService(backend, ClaimReader(server.json_api()), Checkpoint(root / "ckpt", root / "boot_id"), root / "cdi")


@pytest.mark.parametrize("damage", ["record-flipped", "record-missing", "record-and-spec-missing"])
def test_damaged_record_never_destroys_the_instance_in_use(
    open_backend: OpenBackend, apiserver: sim_apiserver.SimApiServer, tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path / "state")
    first = service(backend, apiserver, tmp_path)
    first.recover()
    a = claim(apiserver, "a")
    answer = first.prepare([a])[a.uid]
    assert answer.error == ""
    first.close()
    fake = backend.simulator
    assert fake is not None
    live = instances(fake)
    assert len(live) == 1
    record = tmp_path / "ckpt" / f"{a.uid}.json"
    spec = Path(cdi.spec_path(tmp_path / "cdi", DRIVER, a.uid))
    if damage == "record-flipped":
        data = record.read_bytes()
        at = data.rindex(b'"giId"') + 2
        record.write_bytes(data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :])
    else:
        record.unlink()
    if damage == "record-and-spec-missing":  # only the MIG ownership journal is left
        spec.unlink()
        Path(cdi.claim_file_path(tmp_path / "cdi", DRIVER, a.uid)).unlink()

    caplog.set_level(logging.ERROR)
    again = restarted(backend)
    second = service(again, apiserver, tmp_path)
    try:
        second.recover()
        assert instances(fake) == live and fake.destroyed == []  # the running container keeps its GPU
        assert "rebuilt from evidence" in caplog.text
        b = claim(apiserver, "b")
        refused = second.prepare([b])[b.uid].error
        assert a.uid in refused and DEVICE in refused, refused
        assert instances(fake) == live  # the placement was not handed out again
        repeat = second.prepare([a])[a.uid]
        if damage == "record-and-spec-missing":
            assert "CDI spec" in repeat.error
        else:
            assert repeat.error == "" and repeat.devices == answer.devices

        assert second.unprepare([a]) == {a.uid: ""}
        assert instances(fake) == [] and not os.path.lexists(record) and not spec.exists()
        assert list((tmp_path / "state" / SUBDIR).glob("*.json")) == []
        assert second.prepare([b])[b.uid].error == "" and len(instances(fake)) == 1
    finally:
        second.close()


def test_journal_entry_whose_instance_is_gone_reserves_nothing(
    open_backend: OpenBackend, apiserver: sim_apiserver.SimApiServer, tmp_path: Path
) -> None:
    """A destroy whose journal update failed leaves an entry for an instance that no longer exists: nothing
    is in use, so the placement must not stay blocked by a claim nobody will unprepare."""
    from dra_driver_nvidia.ownership import OwnedInstance, OwnershipJournal

    backend = open_backend("dgx-h100", partitioning="dynamic", state_dir=tmp_path / "state")
    fake = backend.simulator
    assert fake is not None
    OwnershipJournal.under(tmp_path / "state").record(OwnedInstance("gone-claim", DEVICE, fake.gpus[0].spec.uuid, 19, 0))
    again = restarted(backend)
    svc = service(again, apiserver, tmp_path)
    try:
        svc.recover()
        assert svc.checkpoint_record("gone-claim") is None
        b = claim(apiserver, "b")
        assert svc.prepare([b])[b.uid].error == "" and len(instances(fake)) == 1
    finally:
        svc.close()
