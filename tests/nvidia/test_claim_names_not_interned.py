"""A claim's file names never enter CPython's table of interned strings.

Python 3.11's pathlib interns every path component it parses; a per-claim path built as a Path (CDI spec, claim
file, claim lock, checkpoint record, MIG ownership and sharing records) put the claim's UID in that table, which
grew by a step over the first thousand claims of a daemon (docs/performance.md, "Memory over cycles"). The paths
are built as str (dra_driver/common/node_file.child_path); this test fails when any of them goes back to pathlib.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.backend.interface import ClaimRef
from dra_driver.kube.claims import ClaimReader
from dra_driver.node.checkpoint import Checkpoint
from dra_driver.node.plugin.prepare import PrepareService
from dra_driver.simulation import api_server as sim_apiserver
from dra_driver.simulation.claims import allocated_claim_object

from .conftest import OpenBackend

DRIVER = "gpu.nvidia.com"


@pytest.fixture
def apiserver() -> Iterator[sim_apiserver.SimApiServer]:
    with sim_apiserver.SimApiServer() as server:
        yield server


@pytest.mark.parametrize(("partitioning", "device"), [("static", "gpu-0"), ("dynamic", "gpu-0-mig-1g10gb-19-0")])
def test_a_prepared_and_unprepared_claim_interns_none_of_its_names(
    open_backend: OpenBackend, apiserver: sim_apiserver.SimApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    partitioning: str, device: str,
) -> None:  # fmt: skip
    backend = open_backend("dgx-h100", partitioning=partitioning, state_dir=tmp_path / "state")
    (tmp_path / "boot_id").write_text("boot-1\n")
    service = PrepareService(
        backend, ClaimReader(apiserver.json_api()), Checkpoint(tmp_path / "ckpt", tmp_path / "boot_id"), tmp_path / "cdi",
        shared_lock=tmp_path / "locks" / "serialize.lock", claim_locks=tmp_path / "locks" / "claims",
    )  # fmt: skip
    try:
        service.recover()
        stored = apiserver.store.put(allocated_claim_object("a", "default", DRIVER, "node-a", {"gpu": [device]}, device_class=DRIVER))
        ref = ClaimRef("default", "a", stored["metadata"]["uid"])
        interned: list[str] = []
        real_intern = sys.intern
        monkeypatch.setattr(sys, "intern", lambda text: (interned.append(text), real_intern(text))[1])
        assert service.prepare([ref])[ref.uid].error == ""
        assert service.unprepare([ref]) == {ref.uid: ""}
        monkeypatch.undo()
    finally:
        service.close()
    assert [text for text in interned if ref.uid in text] == []
